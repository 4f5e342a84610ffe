//! One producer handle (`rd_kafka_t`) and what its callbacks report: librdkafka calls them on its
//! own threads or inside `poll`/`flush`, and they only queue what they were told (`Reports`) —
//! the Python class hands it to the caller's callables in the caller's thread, as confluent-kafka
//! does. The OAUTHBEARER token refresh is the exception: librdkafka's SASL background thread
//! calls the user's `oauth_cb` with the GIL taken, so a token is fetched without anyone polling.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use super::ffi::{self, Api, rd_kafka_t, rd_kafka_vu_t, text};

/// A record header: its name and value (None: a null value, not an empty one).
pub type Header = (CString, Option<Vec<u8>>);

/// One record as `Handle::produce` hands it over (-1: the partitioner chooses).
pub struct Record<'a> {
    pub topic: &'a CStr,
    pub partition: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [Header],
}

/// One delivery report (failures only, unless the user asked for every report).
pub struct Delivery {
    pub code: ffi::rd_kafka_resp_err_t,
    pub reason: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// An error the client reported (`error_cb`), with whether it is fatal.
pub struct ClientError {
    pub code: ffi::rd_kafka_resp_err_t,
    pub reason: String,
    pub fatal: bool,
}

/// What the callbacks queued since the caller last took it.
#[derive(Default)]
pub struct Reports {
    pub deliveries: Vec<Delivery>,
    pub errors: Vec<ClientError>,
    pub stats: Option<String>,
    pub logs: Vec<(c_int, String, String)>,
}

/// The state every callback of one handle reaches through librdkafka's opaque pointer.
pub struct Shared {
    api: &'static Api,
    reports: Mutex<Reports>,
    /// The user's `oauth_cb` (SASL OAUTHBEARER): `oauth_cb(config) -> (token, expiry_s[,
    /// principal[, extensions]])`, confluent-kafka's contract.
    oauth: Option<Py<PyAny>>,
    /// Whether a token was ever set (confluent-kafka waits for the first before returning).
    pub token_set: std::sync::atomic::AtomicBool,
    /// Whether librdkafka's own log lines are queued for a Python logger.
    pub logging: bool,
}

impl Shared {
    pub fn take(&self) -> Reports {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reports> {
        // A callback never panics while holding the lock; a poisoned lock still holds reports.
        self.reports
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An error of a transactional call, from librdkafka's `rd_kafka_error_t` (its flags are what
/// `laminar.kafka._errors.classify` reads).
#[derive(Debug, Clone)]
pub struct CallError {
    pub code: ffi::rd_kafka_resp_err_t,
    pub reason: String,
    pub fatal: bool,
    pub retriable: bool,
    pub txn_requires_abort: bool,
}

impl CallError {
    pub fn plain(code: ffi::rd_kafka_resp_err_t, reason: String) -> Self {
        Self {
            code,
            reason,
            fatal: false,
            retriable: false,
            txn_requires_abort: false,
        }
    }
}

/// How long after a transaction ended (`EndTxn`) its coordinator may still be writing the
/// transaction markers and the completed state. A partition added to the next transaction before
/// then is answered `CONCURRENT_TRANSACTIONS`, which librdkafka retries after a fixed 20 ms (an
/// epoch marker's `AddOffsetsToTxn`, after `retry.backoff.ms`): an epoch written right after the
/// last one took 34.5 ms at the median where one started 3 ms later took 7.8 (one broker, 1,000
/// records; 10.5 against 45 with 8 partitions). So a transaction's first record or epoch marker
/// waits until this has passed since the last one ended (docs/kafka.md, "Back-to-back epochs").
pub const SETTLE: Duration = Duration::from_millis(3);

/// What [`SETTLE`] needs to know of the transactions, under one lock.
#[derive(Default)]
struct Txns {
    /// When the last transaction that reached the coordinator was committed or aborted, until
    /// the next one's first record or marker waited out [`SETTLE`].
    ended: Option<Instant>,
    /// Whether the open transaction reached the coordinator (a record or a marker): librdkafka
    /// ends one that did not without an `EndTxn`, and nothing is left to wait for.
    reached: bool,
}

/// A producer handle. Destroyed when dropped (with the GIL released by its owner).
pub struct Handle {
    api: &'static Api,
    rk: *mut rd_kafka_t,
    shared: Box<Shared>,
    /// The transactions' timing for [`SETTLE`] (`settle`, `ended_if_ok`).
    txns: Mutex<Txns>,
}

// SAFETY: librdkafka's handle is thread-safe (every API call may come from any thread); `Shared`
// is reached only through its mutex, atomics and a `Py` (Send + Sync).
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

impl Handle {
    /// A producer with `settings`; `oauth` and `logging` as for [`Shared`].
    pub fn new(
        api: &'static Api,
        settings: &[(CString, CString)],
        oauth: Option<Py<PyAny>>,
        logging: bool,
    ) -> Result<Self, CallError> {
        let shared = Box::new(Shared {
            api,
            reports: Mutex::new(Reports::default()),
            oauth,
            token_set: std::sync::atomic::AtomicBool::new(false),
            logging,
        });
        let mut errstr = [0 as c_char; 512];
        // SAFETY: librdkafka's configuration API; the conf is destroyed on every error path and
        // owned by the handle once rd_kafka_new succeeds.
        unsafe {
            let conf = (api.rd_kafka_conf_new)();
            for (name, value) in settings {
                let res = (api.rd_kafka_conf_set)(
                    conf,
                    name.as_ptr(),
                    value.as_ptr(),
                    errstr.as_mut_ptr(),
                    errstr.len(),
                );
                if res != ffi::CONF_OK {
                    (api.rd_kafka_conf_destroy)(conf);
                    return Err(CallError::plain(
                        ffi::ERR_INVALID_ARG,
                        text(errstr.as_ptr()),
                    ));
                }
            }
            let opaque: *const Shared = &*shared;
            (api.rd_kafka_conf_set_opaque)(conf, opaque.cast_mut().cast());
            (api.rd_kafka_conf_set_dr_msg_cb)(conf, on_delivery);
            (api.rd_kafka_conf_set_error_cb)(conf, on_error);
            (api.rd_kafka_conf_set_stats_cb)(conf, on_stats);
            if shared.logging {
                (api.rd_kafka_conf_set_log_cb)(conf, on_log);
            }
            if shared.oauth.is_some() {
                (api.rd_kafka_conf_set_oauthbearer_token_refresh_cb)(conf, on_oauth_refresh);
                (api.rd_kafka_conf_enable_sasl_queue)(conf, 1);
            }
            let rk = (api.rd_kafka_new)(ffi::PRODUCER, conf, errstr.as_mut_ptr(), errstr.len());
            if rk.is_null() {
                (api.rd_kafka_conf_destroy)(conf);
                return Err(CallError::plain(
                    ffi::ERR_INVALID_ARG,
                    text(errstr.as_ptr()),
                ));
            }
            let handle = Self {
                api,
                rk,
                shared,
                txns: Mutex::new(Txns::default()),
            };
            if handle.shared.logging {
                // `log.queue` holds the log lines until a queue is set: NULL is the main queue,
                // which `poll` and `flush` serve (as confluent-kafka does for its `logger`)
                (api.rd_kafka_set_log_queue)(rk, std::ptr::null_mut());
            }
            if handle.shared.oauth.is_some() {
                let error = (api.rd_kafka_sasl_background_callbacks_enable)(rk);
                if let Some(e) = handle.error(error) {
                    return Err(e);
                }
            }
            Ok(handle)
        }
    }

    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Turns a returned `rd_kafka_error_t*` into a [`CallError`] (None: success), freeing it.
    fn error(&self, error: *mut ffi::rd_kafka_error_t) -> Option<CallError> {
        if error.is_null() {
            return None;
        }
        let api = self.api;
        // SAFETY: a non-NULL error returned by librdkafka, destroyed once here.
        unsafe {
            let e = CallError {
                code: (api.rd_kafka_error_code)(error),
                reason: text((api.rd_kafka_error_string)(error)),
                fatal: (api.rd_kafka_error_is_fatal)(error) != 0,
                retriable: (api.rd_kafka_error_is_retriable)(error) != 0,
                txn_requires_abort: (api.rd_kafka_error_txn_requires_abort)(error) != 0,
            };
            (api.rd_kafka_error_destroy)(error);
            Some(e)
        }
    }

    fn result(&self, error: *mut ffi::rd_kafka_error_t) -> Result<(), CallError> {
        self.error(error).map_or(Ok(()), Err)
    }

    pub fn init_transactions(&self, timeout_ms: c_int) -> Result<(), CallError> {
        // SAFETY: a live handle.
        self.result(unsafe { (self.api.rd_kafka_init_transactions)(self.rk, timeout_ms) })
    }

    pub fn begin_transaction(&self) -> Result<(), CallError> {
        // SAFETY: a live handle.
        self.result(unsafe { (self.api.rd_kafka_begin_transaction)(self.rk) })
    }

    pub fn commit_transaction(&self, timeout_ms: c_int) -> Result<(), CallError> {
        // SAFETY: a live handle.
        let result =
            self.result(unsafe { (self.api.rd_kafka_commit_transaction)(self.rk, timeout_ms) });
        self.ended_if_ok(result)
    }

    pub fn abort_transaction(&self, timeout_ms: c_int) -> Result<(), CallError> {
        // SAFETY: a live handle.
        let result =
            self.result(unsafe { (self.api.rd_kafka_abort_transaction)(self.rk, timeout_ms) });
        self.ended_if_ok(result)
    }

    /// Notes when a transaction that reached the coordinator ended (its `EndTxn` answered), for
    /// the next one's [`SETTLE`]; a failed commit or abort notes nothing.
    fn ended_if_ok(&self, result: Result<(), CallError>) -> Result<(), CallError> {
        if result.is_ok() {
            let mut txns = self.txns_lock();
            if std::mem::take(&mut txns.reached) {
                txns.ended = Some(Instant::now());
            }
        }
        result
    }

    fn txns_lock(&self) -> std::sync::MutexGuard<'_, Txns> {
        // Nothing panics while holding it; a poisoned lock still holds the timing.
        self.txns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Called before a record or the epoch marker reaches librdkafka: what is left of
    /// [`SETTLE`] since the last transaction ended, once — the caller waits it out (without the
    /// GIL). Later calls in the transaction, and a first one long after the last commit, get
    /// `None`.
    pub fn settle(&self) -> Option<Duration> {
        let mut txns = self.txns_lock();
        txns.reached = true;
        let ended = txns.ended.take()?;
        let left = SETTLE.saturating_sub(ended.elapsed());
        (!left.is_zero()).then_some(left)
    }

    /// `send_offsets_to_transaction` of `(topic, partition, offset)` positions for `group_id`
    /// (what an epoch marker is: docs/kafka.md).
    pub fn send_offsets(
        &self,
        positions: &[(CString, i32, i64)],
        group_id: &CStr,
        timeout_ms: c_int,
    ) -> Result<(), CallError> {
        let api = self.api;
        // SAFETY: the list and the group metadata are created, passed and destroyed here; the
        // element returned by `_add` is written before the list is used.
        unsafe {
            let list = (api.rd_kafka_topic_partition_list_new)(positions.len() as c_int);
            for (topic, partition, offset) in positions {
                let elem =
                    (api.rd_kafka_topic_partition_list_add)(list, topic.as_ptr(), *partition);
                (*elem).offset = *offset;
            }
            let group = (api.rd_kafka_consumer_group_metadata_new)(group_id.as_ptr());
            let error =
                (api.rd_kafka_send_offsets_to_transaction)(self.rk, list, group, timeout_ms);
            (api.rd_kafka_consumer_group_metadata_destroy)(group);
            (api.rd_kafka_topic_partition_list_destroy)(list);
            self.result(error)
        }
    }

    /// Hands one record to librdkafka (copied: nothing here must outlive the call). While
    /// librdkafka's queue is full it serves delivery reports and tries again, up to `deadline`
    /// (None: not at all); then the queue-full error. `args` is the caller's scratch space,
    /// reused between records.
    #[inline]
    pub fn produce(
        &self,
        args: &mut Vec<rd_kafka_vu_t>,
        record: &Record<'_>,
        deadline: Option<Instant>,
    ) -> Result<(), CallError> {
        args.clear();
        args.push(rd_kafka_vu_t::cstr(ffi::VTYPE_TOPIC, record.topic.as_ptr()));
        args.push(rd_kafka_vu_t::int(ffi::VTYPE_PARTITION, record.partition));
        args.push(rd_kafka_vu_t::int(ffi::VTYPE_MSGFLAGS, ffi::MSG_F_COPY));
        args.push(rd_kafka_vu_t::mem(ffi::VTYPE_VALUE, record.value));
        if record.key.is_some() {
            args.push(rd_kafka_vu_t::mem(ffi::VTYPE_KEY, record.key));
        }
        for (name, value) in record.headers {
            args.push(rd_kafka_vu_t::header(name.as_ptr(), value.as_deref()));
        }
        loop {
            // SAFETY: every pointer in `args` borrows from `record`, which outlives the call;
            // RD_KAFKA_MSG_F_COPY makes librdkafka copy the payloads, and headers are copied.
            let error =
                unsafe { (self.api.rd_kafka_produceva)(self.rk, args.as_ptr(), args.len()) };
            match self.result(error) {
                Err(e)
                    if e.code == ffi::ERR_QUEUE_FULL
                        && deadline.is_some_and(|d| Instant::now() < d) =>
                {
                    self.poll(5);
                }
                other => return other,
            }
        }
    }

    /// Serves queued callbacks for up to `timeout_ms`; the number served.
    pub fn poll(&self, timeout_ms: c_int) -> c_int {
        // SAFETY: a live handle.
        unsafe { (self.api.rd_kafka_poll)(self.rk, timeout_ms) }
    }

    /// Waits up to `timeout` for every queued record to be acknowledged; the records left.
    ///
    /// librdkafka's `rd_kafka_flush` re-checks for acknowledged records only when its poll of the
    /// reply queue times out (10 ms): with delivery reports for failures only, nothing arrives
    /// there to end the wait early, so an epoch of a few records would wait 10 ms after its last
    /// acknowledgement. It is called here in steps of `FLUSH_STEP` instead — each step marks the
    /// producer flushing (linger.ms ends) and wakes the broker threads, as one call does.
    ///
    /// A step that succeeds means no record is left: 0. The out-queue length
    /// (`rd_kafka_outq_len`) is not asked then, since it also counts the statistics and error
    /// events waiting for a poll, and one arriving just after the flush was once taken for a
    /// record not acknowledged, failing an epoch whose records were all written. When the time
    /// is up, those events are served first, so what is left is records.
    pub fn flush(&self, timeout: Duration) -> c_int {
        const FLUSH_STEP: Duration = Duration::from_millis(1);
        let deadline = Instant::now() + timeout;
        loop {
            let step = deadline
                .saturating_duration_since(Instant::now())
                .min(FLUSH_STEP);
            let ms = c_int::try_from(step.as_millis()).unwrap_or(c_int::MAX);
            // SAFETY: a live handle.
            let code = unsafe { (self.api.rd_kafka_flush)(self.rk, ms) };
            if code == ffi::ERR_NO_ERROR {
                return 0;
            }
            if step.is_zero() {
                self.poll(0);
                return self.queued();
            }
        }
    }

    /// Records not yet acknowledged, and the callbacks and events waiting for a poll.
    pub fn queued(&self) -> c_int {
        // SAFETY: a live handle.
        unsafe { (self.api.rd_kafka_outq_len)(self.rk) }
    }

    pub fn purge(&self, flags: c_int) {
        // SAFETY: a live handle.
        unsafe {
            (self.api.rd_kafka_purge)(self.rk, flags);
        }
    }

    /// Every topic of the cluster: its name, its partition count and its error (0: none).
    pub fn topics(&self, timeout_ms: c_int) -> Result<Vec<(String, usize, i32)>, CallError> {
        let api = self.api;
        let mut meta: *const ffi::rd_kafka_metadata_t = std::ptr::null();
        // SAFETY: librdkafka fills `meta` on success; it is read, then destroyed once.
        unsafe {
            let code =
                (api.rd_kafka_metadata)(self.rk, 1, std::ptr::null_mut(), &mut meta, timeout_ms);
            if code != ffi::ERR_NO_ERROR || meta.is_null() {
                return Err(CallError::plain(code, api.err2str(code)));
            }
            let m = &*meta;
            let mut out = Vec::with_capacity(m.topic_cnt.max(0) as usize);
            for i in 0..m.topic_cnt.max(0) as usize {
                let t = &*m.topics.add(i);
                out.push((text(t.topic), t.partition_cnt.max(0) as usize, t.err));
            }
            (api.rd_kafka_metadata_destroy)(meta);
            Ok(out)
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle is live and nothing else uses it (its owner is being dropped).
        unsafe { (self.api.rd_kafka_destroy)(self.rk) }
    }
}

// -- callbacks: librdkafka's threads, or poll/flush; no GIL needed except for oauth ------------

/// # Safety
/// `opaque` is the `Shared` of a live handle (set by [`Handle::new`]).
unsafe fn shared<'a>(opaque: *mut c_void) -> Option<&'a Shared> {
    // SAFETY: by the caller; NULL (never set) is refused.
    unsafe { opaque.cast::<Shared>().as_ref() }
}

unsafe extern "C" fn on_delivery(
    _rk: *mut rd_kafka_t,
    message: *const ffi::rd_kafka_message_t,
    opaque: *mut c_void,
) {
    // SAFETY: librdkafka passes the handle's opaque and a valid message for the call's duration.
    let (Some(shared), Some(m)) = (unsafe { shared(opaque) }, unsafe { message.as_ref() }) else {
        return;
    };
    let bytes = |ptr: *mut c_void, len: usize| {
        // SAFETY: librdkafka's payload/key pointers are valid for `len` bytes (or NULL).
        (!ptr.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }.to_vec())
    };
    let delivery = Delivery {
        code: m.err,
        reason: if m.err == ffi::ERR_NO_ERROR {
            String::new()
        } else {
            shared.api.err2str(m.err)
        },
        // SAFETY: the message's topic handle is valid during the callback.
        topic: unsafe { text((shared.api.rd_kafka_topic_name)(m.rkt)) },
        partition: m.partition,
        offset: m.offset,
        key: bytes(m.key, m.key_len),
        value: bytes(m.payload, m.len),
    };
    shared.lock().deliveries.push(delivery);
}

unsafe extern "C" fn on_error(
    rk: *mut rd_kafka_t,
    code: c_int,
    reason: *const c_char,
    opaque: *mut c_void,
) {
    // SAFETY: the handle's opaque.
    let Some(shared) = (unsafe { shared(opaque) }) else {
        return;
    };
    let mut error = ClientError {
        code,
        // SAFETY: a valid string for the call's duration.
        reason: unsafe { text(reason) },
        fatal: false,
    };
    if code == ffi::ERR_FATAL {
        // The underlying error of a fatal one (what confluent-kafka reports too).
        let mut errstr = [0 as c_char; 512];
        // SAFETY: a live handle and a buffer of the size given.
        let underlying =
            unsafe { (shared.api.rd_kafka_fatal_error)(rk, errstr.as_mut_ptr(), errstr.len()) };
        if underlying != ffi::ERR_NO_ERROR {
            error.code = underlying;
            // SAFETY: NUL-terminated by librdkafka.
            error.reason = unsafe { text(errstr.as_ptr()) };
        }
        error.fatal = true;
    }
    shared.lock().errors.push(error);
}

unsafe extern "C" fn on_stats(
    _rk: *mut rd_kafka_t,
    json: *mut c_char,
    len: usize,
    opaque: *mut c_void,
) -> c_int {
    // SAFETY: the handle's opaque; `json` holds `len` bytes.
    if let Some(shared) = unsafe { shared(opaque) } {
        let bytes = unsafe { std::slice::from_raw_parts(json.cast::<u8>(), len) };
        shared.lock().stats = Some(String::from_utf8_lossy(bytes).into_owned());
    }
    0 // librdkafka frees the JSON
}

unsafe extern "C" fn on_log(
    rk: *const rd_kafka_t,
    level: c_int,
    fac: *const c_char,
    buf: *const c_char,
) {
    let Some(api) = ffi::loaded() else { return };
    // SAFETY: the handle's opaque, and valid strings for the call's duration.
    let Some(shared) = (unsafe { shared((api.rd_kafka_opaque)(rk)) }) else {
        return;
    };
    let line = unsafe { (level, text(fac), text(buf)) };
    shared.lock().logs.push(line);
}

unsafe extern "C" fn on_oauth_refresh(
    rk: *mut rd_kafka_t,
    config: *const c_char,
    opaque: *mut c_void,
) {
    // SAFETY: the handle's opaque; `config` is NULL or a valid string.
    let Some(shared) = (unsafe { shared(opaque) }) else {
        return;
    };
    let Some(callback) = shared.oauth.as_ref() else {
        return;
    };
    let config = unsafe { text(config) };
    let outcome = Python::attach(|py| token_from(py, callback, &config));
    let api = shared.api;
    match outcome {
        Ok(token) => {
            let ext_ptrs: Vec<*const c_char> =
                token.extensions.iter().map(|s| s.as_ptr()).collect();
            let mut errstr = [0 as c_char; 512];
            // SAFETY: every string lives until the call returns; librdkafka copies them.
            let code = unsafe {
                (api.rd_kafka_oauthbearer_set_token)(
                    rk,
                    token.value.as_ptr(),
                    token.lifetime_ms,
                    token.principal.as_ptr(),
                    ext_ptrs.as_ptr(),
                    ext_ptrs.len(),
                    errstr.as_mut_ptr(),
                    errstr.len(),
                )
            };
            if code == ffi::ERR_NO_ERROR {
                shared
                    .token_set
                    .store(true, std::sync::atomic::Ordering::SeqCst);
            } else {
                let why = unsafe { text(errstr.as_ptr()) };
                let why = CString::new(format!("the token oauth_cb returned was refused: {why}"))
                    .unwrap_or_default();
                // SAFETY: a live handle and a valid string.
                unsafe { (api.rd_kafka_oauthbearer_set_token_failure)(rk, why.as_ptr()) };
            }
        }
        Err(why) => {
            let why = CString::new(why.replace('\0', " ")).unwrap_or_default();
            // SAFETY: a live handle and a valid string.
            unsafe { (api.rd_kafka_oauthbearer_set_token_failure)(rk, why.as_ptr()) };
        }
    }
}

/// A token as librdkafka takes it.
struct Token {
    value: CString,
    lifetime_ms: i64,
    principal: CString,
    /// Key, value, key, value, ...
    extensions: Vec<CString>,
}

/// Calls `oauth_cb(config)` and reads `(token, expiry_s[, principal[, extensions]])`. The error
/// names the callback, never the token.
fn token_from(py: Python<'_>, callback: &Py<PyAny>, config: &str) -> Result<Token, String> {
    let result = callback.call1(py, (config,)).map_err(|e| {
        format!(
            "oauth_cb raised {}",
            e.get_type(py)
                .name()
                .map_or_else(|_| "an exception".into(), |n| n.to_string())
        )
    })?;
    let bad = || {
        "oauth_cb must return (token, expiry_time[, principal[, extensions]]): a str token, the \
         expiry in seconds since the epoch, a str principal and a dict of str extensions"
            .to_string()
    };
    let tuple = result.bind(py).cast::<PyTuple>().map_err(|_| bad())?;
    if !(2..=4).contains(&tuple.len()) {
        return Err(bad());
    }
    let value: String = tuple
        .get_item(0)
        .and_then(|v| v.extract())
        .map_err(|_| bad())?;
    let expiry: f64 = tuple
        .get_item(1)
        .and_then(|v| v.extract())
        .map_err(|_| bad())?;
    let principal: String = match tuple.get_item(2) {
        Ok(p) => p.extract().map_err(|_| bad())?,
        Err(_) => String::new(),
    };
    let mut extensions = Vec::new();
    if let Ok(ext) = tuple.get_item(3) {
        if !ext.is_none() {
            let dict = ext.cast::<PyDict>().map_err(|_| bad())?;
            for (k, v) in dict.iter() {
                let k: String = k.extract().map_err(|_| bad())?;
                let v: String = v.extract().map_err(|_| bad())?;
                extensions.push(CString::new(k).map_err(|_| bad())?);
                extensions.push(CString::new(v).map_err(|_| bad())?);
            }
        }
    }
    Ok(Token {
        value: CString::new(value).map_err(|_| bad())?,
        lifetime_ms: (expiry * 1000.0) as i64,
        principal: CString::new(principal).map_err(|_| bad())?,
        extensions,
    })
}
