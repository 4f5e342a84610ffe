"""Kafka: the transactional sink (:mod:`.sink`), its record encoding and connection pieces
(:mod:`.records`, :mod:`.conn`) and the reader of committed records (:mod:`.log`)."""
