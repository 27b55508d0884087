-- Why a fire was refused (its outcome 'refused': intake refused the task).
ALTER TABLE schedule_fires ADD COLUMN reason TEXT;
-- What a submission with an idempotency key asked for, so that the key reused with other
-- fields is refused instead of answered with the first task.
ALTER TABLE tasks ADD COLUMN fingerprint TEXT;
