//! Arrow → Kafka payloads and PostgreSQL COPY BINARY (the hot path).
