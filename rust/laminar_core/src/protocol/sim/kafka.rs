//! An in-memory Kafka: transactional ids with producer ids and epochs, fencing, transactions
//! that the broker aborts after its timeout on the simulated clock, `EndTxn` with a recorded
//! producer identity, and epoch markers that commit with their transaction.

use std::collections::BTreeMap;

use crate::protocol::sim::{Epoch, Record};

#[derive(Debug, Clone)]
pub(in crate::protocol) struct OpenTxn {
    pub producer_epoch: i32,
    pub records: Vec<Record>,
    pub marker: Option<Epoch>,
    pub started_ms: u64,
}

#[derive(Debug, Clone, Default)]
pub(in crate::protocol) struct Tid {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub open: Option<OpenTxn>,
    pub marker: Option<Epoch>,
}

/// Why a Kafka call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::protocol) enum KafkaErr {
    /// Another producer of the transactional id took over (or the broker bumped the epoch).
    Fenced,
    /// No transaction of this producer is open (the broker aborted it).
    NoTransaction,
}

#[derive(Debug, Clone, Default)]
pub(in crate::protocol) struct Kafka {
    pub now_ms: u64,
    pub timeout_ms: u64,
    next_producer_id: i64,
    pub tids: BTreeMap<String, Tid>,
    /// Committed records: (transactional id, record).
    pub committed: Vec<(String, Record)>,
}

impl Kafka {
    pub fn new(timeout_ms: u64) -> Self {
        Self {
            timeout_ms,
            next_producer_id: 1000,
            ..Self::default()
        }
    }

    fn tid(&mut self, tid: &str) -> &mut Tid {
        self.tids.entry(tid.to_owned()).or_default()
    }

    /// A new producer: fences the previous one and aborts its open transaction.
    pub fn init_transactions(&mut self, tid: &str) -> (i64, i32) {
        let fresh = self.next_producer_id;
        let t = self.tids.entry(tid.to_owned()).or_default();
        if t.producer_id == 0 {
            t.producer_id = fresh;
            self.next_producer_id += 1;
        } else {
            t.producer_epoch += 1;
        }
        t.open = None;
        (t.producer_id, t.producer_epoch)
    }

    fn check(&mut self, tid: &str, epoch: i32) -> Result<&mut Tid, KafkaErr> {
        let t = self.tid(tid);
        if t.producer_epoch != epoch {
            return Err(KafkaErr::Fenced);
        }
        Ok(t)
    }

    pub fn begin(&mut self, tid: &str, epoch: i32) -> Result<(), KafkaErr> {
        let now = self.now_ms;
        let t = self.check(tid, epoch)?;
        t.open = Some(OpenTxn {
            producer_epoch: epoch,
            records: Vec::new(),
            marker: None,
            started_ms: now,
        });
        Ok(())
    }

    fn open(&mut self, tid: &str, epoch: i32) -> Result<&mut OpenTxn, KafkaErr> {
        self.check(tid, epoch)?
            .open
            .as_mut()
            .ok_or(KafkaErr::NoTransaction)
    }

    pub fn produce(&mut self, tid: &str, epoch: i32, record: Record) -> Result<(), KafkaErr> {
        self.open(tid, epoch)?.records.push(record);
        Ok(())
    }

    pub fn send_marker(&mut self, tid: &str, epoch: i32, marker: Epoch) -> Result<(), KafkaErr> {
        self.open(tid, epoch)?.marker = Some(marker);
        Ok(())
    }

    /// Flush: fails if the transaction is gone (timed out, fenced).
    pub fn flush(&mut self, tid: &str, epoch: i32) -> Result<(), KafkaErr> {
        self.open(tid, epoch).map(|_| ())
    }

    fn finish(&mut self, tid: &str, commit: bool) {
        let t = self.tid(tid);
        let Some(open) = t.open.take() else { return };
        if commit {
            if let Some(m) = open.marker {
                t.marker = Some(m);
            }
            let tid = tid.to_owned();
            self.committed
                .extend(open.records.iter().map(|r| (tid.clone(), *r)));
        }
    }

    pub fn commit(&mut self, tid: &str, epoch: i32) -> Result<(), KafkaErr> {
        self.open(tid, epoch)?;
        self.finish(tid, true);
        Ok(())
    }

    pub fn abort(&mut self, tid: &str, epoch: i32) -> Result<(), KafkaErr> {
        self.check(tid, epoch)?;
        self.finish(tid, false);
        Ok(())
    }

    /// Protocol-level completion with a recorded producer identity.
    pub fn end_txn(
        &mut self,
        tid: &str,
        producer_id: i64,
        producer_epoch: i32,
    ) -> Result<(), KafkaErr> {
        let t = self.tid(tid);
        if t.producer_id != producer_id || t.producer_epoch != producer_epoch {
            return Err(KafkaErr::Fenced);
        }
        match &t.open {
            Some(open) if open.producer_epoch == producer_epoch => {
                self.finish(tid, true);
                Ok(())
            }
            _ => Err(KafkaErr::NoTransaction),
        }
    }

    /// Advances the clock; the broker aborts transactions open longer than its timeout (and
    /// bumps the producer epoch, as Kafka does).
    pub fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
        let now = self.now_ms;
        let timeout = self.timeout_ms;
        for t in self.tids.values_mut() {
            if t.open
                .as_ref()
                .is_some_and(|o| now - o.started_ms > timeout)
            {
                t.open = None;
                t.producer_epoch += 1;
            }
        }
    }

    pub fn marker(&self, tid: &str) -> Option<Epoch> {
        self.tids.get(tid).and_then(|t| t.marker)
    }

    pub fn identity(&self, tid: &str) -> (i64, i32) {
        self.tids
            .get(tid)
            .map_or((-1, -1), |t| (t.producer_id, t.producer_epoch))
    }
}
