-- The lease's holder (owner and epoch) as a key of the row: an update that changes them (a
-- takeover) is a key update, which waits for the FOR KEY SHARE the fence holds, while a renewal
-- (expires_at only) is not, and never queues behind the serving daemon's own batches.
CREATE UNIQUE INDEX leases_holder ON leases (name, owner, epoch);
