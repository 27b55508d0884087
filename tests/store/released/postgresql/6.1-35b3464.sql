-- Daemons that share the board's tenants out among themselves (run --share), and a tenant's
-- lease marked to be handed to one daemon (hive move): its owner gives it back at its next
-- renewal, and only that daemon takes it while it lives.
ALTER TABLE hives ADD COLUMN sharing BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE leases ADD COLUMN handover_to TEXT COLLATE "C";
