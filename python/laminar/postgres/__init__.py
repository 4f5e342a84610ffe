"""PostgreSQL: the transactional sink (:mod:`.sink`) and its pieces (names, table, steps, upsert,
errors)."""
