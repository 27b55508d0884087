"""The hive side of a daemon: a board held (``standby``: a lock, or a lease waited for), its
lease kept (``lease``), and its tenants shared out among the board's daemons (``sharing``)."""
