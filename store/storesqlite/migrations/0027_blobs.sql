-- Payloads stored apart (store/blobs, docs/payloads.md): a payload above the
-- store's threshold is a row here, named by its run and its SHA-256 (key), and
-- the row that would hold it holds a reference instead. A run's deletion
-- deletes its rows here (sqlstore.deleteRuns). With an object store for the
-- payloads, blob_owners names the runs that have payloads there (written
-- before the object), and a run's deletion marks its row gone: the retention
-- purge then deletes the run's objects and the row.
CREATE TABLE blobs (
    namespace TEXT NOT NULL,
    run_id    TEXT NOT NULL,
    key       TEXT NOT NULL,
    data      BLOB NOT NULL
);
CREATE UNIQUE INDEX blobs_key ON blobs (namespace, run_id, key);
CREATE TABLE blob_owners (
    namespace TEXT    NOT NULL,
    run_id    TEXT    NOT NULL,
    gone      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (namespace, run_id)
);
CREATE INDEX blob_owners_gone ON blob_owners (gone) WHERE gone = 1;
