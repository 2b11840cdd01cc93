-- Leave 30 % of each runs page free. A run's row is rewritten at every state
-- change and at every checkpoint of a remote worker (the lease's write
-- sequence); Postgres keeps such a new version on the same page, without new
-- entries in the table's fifteen indexes (a HOT update), only where the page
-- has room. Full pages made three in four of those updates write an entry in
-- every index: w1 through a server, 20,000 runs, had 26,500 of 80,000 updates
-- HOT at the default fillfactor and 33,000 at 70, for 3 to 5 % less Postgres
-- CPU. (Lower fillfactors made all 40,000 checkpoint updates HOT but gained no
-- more: the table grows by as much.) It applies to pages filled from now on.
ALTER TABLE runs SET (fillfactor = 70);
