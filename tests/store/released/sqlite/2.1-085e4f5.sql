-- Who made each change: the uid and pid of the peer whose request it was (SO_PEERCRED).
ALTER TABLE ledger ADD COLUMN uid INTEGER;
ALTER TABLE ledger ADD COLUMN pid INTEGER;
