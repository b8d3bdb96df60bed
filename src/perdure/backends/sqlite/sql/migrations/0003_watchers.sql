-- Version 3 is PostgreSQL's watchers table (who watches a run live, so only watched
-- runs send progress notices). SQLite notices cost nothing and need no such table;
-- this version keeps the two backends' migration numbers the same.
SELECT 1;
