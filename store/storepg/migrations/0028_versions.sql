-- A version per start (store.Run.Pinned): pin_version is the version a run is
-- pinned to, 0 for a run that any worker of its workflow may claim. The claim
-- reads it from the row it locks anyway (as it reads the queue): no index.
ALTER TABLE runs ADD COLUMN pin_version INT4 NOT NULL DEFAULT 0;

-- The workflow versions a worker serves to pinned runs (store.Worker.Versions):
-- a JSON object of workflow name to a list of versions.
ALTER TABLE workers ADD COLUMN versions JSONB NOT NULL DEFAULT '{}';
