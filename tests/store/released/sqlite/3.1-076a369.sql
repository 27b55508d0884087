-- Why a fire was refused (its outcome 'refused': intake refused the task).
ALTER TABLE schedule_fires ADD COLUMN reason TEXT;
