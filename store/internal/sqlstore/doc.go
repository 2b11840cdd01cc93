// Package sqlstore holds what the SQL drivers (storesqlite, storepg) share: the
// state machines of the store written once against a small surface each driver
// implements, the row scanning, and the list queries with their cursors.
//
// A driver gives three things:
//
//   - a Querier (or, inside its write transactions, a Tx): statements with
//     arguments, rows handed to a callback, rows affected;
//   - a Dialect: how parameters are numbered, how times and lists are passed, and
//     the SQL texts of the statements whose shape differs between the dialects;
//   - hooks for what stays its own (cancelling a run, see Tx).
//
// Over these, Methods are the store methods the drivers share, entered through
// one seam each driver implements (Driver: its read and write transactions;
// Own: what it writes itself); a driver's Store embeds them.
//
// SQL written here uses Postgres' numbered parameters ($1, $2, ...); New rewrites
// them once for the dialect. Everything with its own round-trip budget — claims,
// the checkpoint's fast path, the pipelined event send of Postgres, group commit,
// LISTEN/NOTIFY, connection handling — stays in the drivers; docs/storage.md ("What
// the drivers share") draws the line.
package sqlstore
