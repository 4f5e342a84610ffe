//! librdkafka's C API, as far as the producer uses it: the public types it passes (mirroring
//! librdkafka's `rdkafka.h`, whose ABI is stable across 2.x) and a table of the functions, looked
//! up in the librdkafka that confluent-kafka already loaded (docs/kafka.md, "Producing").
//!
//! Nothing is linked at build time: `confluent_kafka.cimpl`'s extension is opened again with
//! `RTLD_NOLOAD` (it is loaded: `import confluent_kafka` did it) and each symbol is resolved
//! through it, which searches its dependencies too — the `librdkafka-<hash>.so.1` a wheel bundles,
//! or the system librdkafka of a conda or source install. The producer owns its own `rd_kafka_t`
//! handle: it shares the library's code, never a handle's state.

#![allow(non_camel_case_types)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

use libloading::os::unix::{Library, RTLD_NOW};

/// dlopen's "only if loaded already" flag (glibc and musl: 4; Apple: 0x10).
#[cfg(target_vendor = "apple")]
const RTLD_NOLOAD: c_int = 0x10;
#[cfg(not(target_vendor = "apple"))]
const RTLD_NOLOAD: c_int = 0x4;

/// The oldest librdkafka whose API this table relies on (`rd_kafka_produceva`, the transactional
/// API, SASL background callbacks): 2.4.0 (`0x020400ff` in librdkafka's version encoding).
pub const MIN_VERSION: c_int = 0x0204_00ff;

pub type rd_kafka_resp_err_t = c_int;

pub const ERR_NO_ERROR: rd_kafka_resp_err_t = 0;
pub const ERR_QUEUE_FULL: rd_kafka_resp_err_t = -184;
pub const ERR_FATAL: rd_kafka_resp_err_t = -150;
pub const ERR_INVALID_ARG: rd_kafka_resp_err_t = -186;

pub const PRODUCER: c_int = 0;
pub const CONF_OK: c_int = 0;
pub const MSG_F_COPY: c_int = 0x2;
pub const PURGE_F_QUEUE: c_int = 0x1;
pub const PURGE_F_INFLIGHT: c_int = 0x2;
pub const PURGE_F_NON_BLOCKING: c_int = 0x4;

/// `rd_kafka_vtype_t`: the tags of `rd_kafka_produceva`'s arguments.
pub const VTYPE_TOPIC: c_int = 1;
pub const VTYPE_PARTITION: c_int = 3;
pub const VTYPE_VALUE: c_int = 4;
pub const VTYPE_KEY: c_int = 5;
pub const VTYPE_MSGFLAGS: c_int = 7;
pub const VTYPE_HEADER: c_int = 9;

/// Opaque handles.
#[repr(C)]
pub struct rd_kafka_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct rd_kafka_conf_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct rd_kafka_error_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct rd_kafka_topic_t {
    _private: [u8; 0],
}
#[repr(C)]
pub struct rd_kafka_consumer_group_metadata_t {
    _private: [u8; 0],
}

/// `rd_kafka_message_t` (a delivery report's message).
#[repr(C)]
pub struct rd_kafka_message_t {
    pub err: rd_kafka_resp_err_t,
    pub rkt: *mut rd_kafka_topic_t,
    pub partition: i32,
    pub payload: *mut c_void,
    pub len: usize,
    pub key: *mut c_void,
    pub key_len: usize,
    pub offset: i64,
    pub _private: *mut c_void,
}

/// `rd_kafka_topic_partition_t`.
#[repr(C)]
pub struct rd_kafka_topic_partition_t {
    pub topic: *mut c_char,
    pub partition: i32,
    pub offset: i64,
    pub metadata: *mut c_void,
    pub metadata_size: usize,
    pub opaque: *mut c_void,
    pub err: rd_kafka_resp_err_t,
    pub _private: *mut c_void,
}

/// `rd_kafka_topic_partition_list_t`.
#[repr(C)]
pub struct rd_kafka_topic_partition_list_t {
    pub cnt: c_int,
    pub size: c_int,
    pub elems: *mut rd_kafka_topic_partition_t,
}

/// `rd_kafka_metadata_topic_t`.
#[repr(C)]
pub struct rd_kafka_metadata_topic_t {
    pub topic: *mut c_char,
    pub partition_cnt: c_int,
    pub partitions: *mut c_void,
    pub err: rd_kafka_resp_err_t,
}

/// `rd_kafka_metadata_t`.
#[repr(C)]
pub struct rd_kafka_metadata_t {
    pub broker_cnt: c_int,
    pub brokers: *mut c_void,
    pub topic_cnt: c_int,
    pub topics: *mut rd_kafka_metadata_topic_t,
    pub orig_broker_id: i32,
    pub orig_broker_name: *mut c_char,
}

/// `rd_kafka_vu_t`'s `header` member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VuHeader {
    pub name: *const c_char,
    pub val: *const c_void,
    pub size: isize,
}

/// `rd_kafka_vu_t`'s `mem` member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct VuMem {
    pub ptr: *const c_void,
    pub size: usize,
}

/// `rd_kafka_vu_t`'s value union, with its 64 bytes of padding (its size is part of the ABI: an
/// array of them is passed).
#[repr(C)]
#[derive(Clone, Copy)]
pub union VuValue {
    pub cstr: *const c_char,
    pub i: c_int,
    pub i32: i32,
    pub mem: VuMem,
    pub header: VuHeader,
    pub pad: [u8; 64],
}

/// `rd_kafka_vu_t`: one tagged argument of `rd_kafka_produceva`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rd_kafka_vu_t {
    pub vtype: c_int,
    pub u: VuValue,
}

impl rd_kafka_vu_t {
    pub fn cstr(vtype: c_int, value: *const c_char) -> Self {
        Self {
            vtype,
            u: VuValue { cstr: value },
        }
    }

    pub fn int(vtype: c_int, value: c_int) -> Self {
        Self {
            vtype,
            u: VuValue { i: value },
        }
    }

    pub fn mem(vtype: c_int, bytes: Option<&[u8]>) -> Self {
        let (ptr, size) = bytes.map_or((std::ptr::null(), 0), |b| (b.as_ptr().cast(), b.len()));
        Self {
            vtype,
            u: VuValue {
                mem: VuMem { ptr, size },
            },
        }
    }

    /// A header; a `None` value is a null one (NULL, size 0), not an empty one.
    pub fn header(name: *const c_char, value: Option<&[u8]>) -> Self {
        let (val, size) = value.map_or((std::ptr::null(), 0), |v| {
            (v.as_ptr().cast(), v.len() as isize)
        });
        Self {
            vtype: VTYPE_HEADER,
            u: VuValue {
                header: VuHeader { name, val, size },
            },
        }
    }
}

pub type DrMsgCb = unsafe extern "C" fn(*mut rd_kafka_t, *const rd_kafka_message_t, *mut c_void);
pub type ErrorCb = unsafe extern "C" fn(*mut rd_kafka_t, c_int, *const c_char, *mut c_void);
pub type StatsCb = unsafe extern "C" fn(*mut rd_kafka_t, *mut c_char, usize, *mut c_void) -> c_int;
pub type LogCb = unsafe extern "C" fn(*const rd_kafka_t, c_int, *const c_char, *const c_char);
pub type OauthCb = unsafe extern "C" fn(*mut rd_kafka_t, *const c_char, *mut c_void);

macro_rules! api {
    ($($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// The librdkafka functions the producer calls.
        pub struct Api {
            $(pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
            /// Keeps the library open (it is confluent-kafka's: never unloaded either way).
            _lib: Library,
        }

        impl Api {
            fn load(lib: Library) -> Result<Self, String> {
                // SAFETY: each symbol is declared above with librdkafka's C signature
                // (rdkafka.h); the library stays open for the process's life.
                unsafe {
                    Ok(Self {
                        $($name: *lib
                            .get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                            .map_err(|e| format!("librdkafka has no {}: {e}", stringify!($name)))?,)*
                        _lib: lib,
                    })
                }
            }
        }
    };
}

api! {
    rd_kafka_version: fn() -> c_int;
    rd_kafka_version_str: fn() -> *const c_char;
    rd_kafka_err2str: fn(rd_kafka_resp_err_t) -> *const c_char;
    rd_kafka_conf_new: fn() -> *mut rd_kafka_conf_t;
    rd_kafka_conf_destroy: fn(*mut rd_kafka_conf_t);
    rd_kafka_conf_set: fn(*mut rd_kafka_conf_t, *const c_char, *const c_char, *mut c_char, usize) -> c_int;
    rd_kafka_conf_set_opaque: fn(*mut rd_kafka_conf_t, *mut c_void);
    rd_kafka_conf_set_dr_msg_cb: fn(*mut rd_kafka_conf_t, DrMsgCb);
    rd_kafka_conf_set_error_cb: fn(*mut rd_kafka_conf_t, ErrorCb);
    rd_kafka_conf_set_stats_cb: fn(*mut rd_kafka_conf_t, StatsCb);
    rd_kafka_conf_set_log_cb: fn(*mut rd_kafka_conf_t, LogCb);
    rd_kafka_conf_set_oauthbearer_token_refresh_cb: fn(*mut rd_kafka_conf_t, OauthCb);
    rd_kafka_conf_enable_sasl_queue: fn(*mut rd_kafka_conf_t, c_int);
    rd_kafka_new: fn(c_int, *mut rd_kafka_conf_t, *mut c_char, usize) -> *mut rd_kafka_t;
    rd_kafka_destroy: fn(*mut rd_kafka_t);
    rd_kafka_opaque: fn(*const rd_kafka_t) -> *mut c_void;
    rd_kafka_sasl_background_callbacks_enable: fn(*mut rd_kafka_t) -> *mut rd_kafka_error_t;
    rd_kafka_set_log_queue: fn(*mut rd_kafka_t, *mut c_void) -> rd_kafka_resp_err_t;
    rd_kafka_poll: fn(*mut rd_kafka_t, c_int) -> c_int;
    rd_kafka_flush: fn(*mut rd_kafka_t, c_int) -> rd_kafka_resp_err_t;
    rd_kafka_outq_len: fn(*mut rd_kafka_t) -> c_int;
    rd_kafka_purge: fn(*mut rd_kafka_t, c_int) -> rd_kafka_resp_err_t;
    rd_kafka_fatal_error: fn(*mut rd_kafka_t, *mut c_char, usize) -> rd_kafka_resp_err_t;
    rd_kafka_init_transactions: fn(*mut rd_kafka_t, c_int) -> *mut rd_kafka_error_t;
    rd_kafka_begin_transaction: fn(*mut rd_kafka_t) -> *mut rd_kafka_error_t;
    rd_kafka_send_offsets_to_transaction: fn(*mut rd_kafka_t, *const rd_kafka_topic_partition_list_t, *const rd_kafka_consumer_group_metadata_t, c_int) -> *mut rd_kafka_error_t;
    rd_kafka_commit_transaction: fn(*mut rd_kafka_t, c_int) -> *mut rd_kafka_error_t;
    rd_kafka_abort_transaction: fn(*mut rd_kafka_t, c_int) -> *mut rd_kafka_error_t;
    rd_kafka_error_code: fn(*const rd_kafka_error_t) -> rd_kafka_resp_err_t;
    rd_kafka_error_string: fn(*const rd_kafka_error_t) -> *const c_char;
    rd_kafka_error_is_fatal: fn(*const rd_kafka_error_t) -> c_int;
    rd_kafka_error_is_retriable: fn(*const rd_kafka_error_t) -> c_int;
    rd_kafka_error_txn_requires_abort: fn(*const rd_kafka_error_t) -> c_int;
    rd_kafka_error_destroy: fn(*mut rd_kafka_error_t);
    rd_kafka_consumer_group_metadata_new: fn(*const c_char) -> *mut rd_kafka_consumer_group_metadata_t;
    rd_kafka_consumer_group_metadata_destroy: fn(*mut rd_kafka_consumer_group_metadata_t);
    rd_kafka_topic_partition_list_new: fn(c_int) -> *mut rd_kafka_topic_partition_list_t;
    rd_kafka_topic_partition_list_add: fn(*mut rd_kafka_topic_partition_list_t, *const c_char, i32) -> *mut rd_kafka_topic_partition_t;
    rd_kafka_topic_partition_list_destroy: fn(*mut rd_kafka_topic_partition_list_t);
    rd_kafka_produceva: fn(*mut rd_kafka_t, *const rd_kafka_vu_t, usize) -> *mut rd_kafka_error_t;
    rd_kafka_topic_name: fn(*const rd_kafka_topic_t) -> *const c_char;
    rd_kafka_metadata: fn(*mut rd_kafka_t, c_int, *mut rd_kafka_topic_t, *mut *const rd_kafka_metadata_t, c_int) -> rd_kafka_resp_err_t;
    rd_kafka_metadata_destroy: fn(*const rd_kafka_metadata_t);
    rd_kafka_oauthbearer_set_token: fn(*mut rd_kafka_t, *const c_char, i64, *const c_char, *const *const c_char, usize, *mut c_char, usize) -> rd_kafka_resp_err_t;
    rd_kafka_oauthbearer_set_token_failure: fn(*mut rd_kafka_t, *const c_char) -> rd_kafka_resp_err_t;
}

static API: OnceLock<Result<Api, String>> = OnceLock::new();

/// The function table, loaded on first use from `library` (confluent-kafka's extension module,
/// which is loaded already). An error says which library and why, for a clear `ConfigError`.
pub fn api(library: impl FnOnce() -> Result<String, String>) -> Result<&'static Api, String> {
    API.get_or_init(|| {
        let path = library()?;
        // SAFETY: opening a library that is loaded already (RTLD_NOLOAD) runs no initializer.
        let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_NOLOAD) }
            .map_err(|e| format!("could not open confluent-kafka's extension {path}: {e}"))?;
        let api = Api::load(lib)?;
        // SAFETY: no arguments; returns librdkafka's static version.
        let version = unsafe { (api.rd_kafka_version)() };
        if version < MIN_VERSION {
            return Err(format!(
                "confluent-kafka's librdkafka is {}; Laminar needs 2.4.0 or newer (upgrade \
                 confluent-kafka)",
                api.version_str()
            ));
        }
        Ok(api)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The function table if it was loaded (callbacks that get no opaque of their own use it).
pub fn loaded() -> Option<&'static Api> {
    API.get().and_then(|r| r.as_ref().ok())
}

impl Api {
    /// librdkafka's version as text (`2.16.1`).
    pub fn version_str(&self) -> String {
        // SAFETY: a static NUL-terminated string.
        unsafe { text((self.rd_kafka_version_str)()) }
    }

    /// The description of an error code.
    pub fn err2str(&self, code: rd_kafka_resp_err_t) -> String {
        // SAFETY: a static NUL-terminated string for any code.
        unsafe { text((self.rd_kafka_err2str)(code)) }
    }
}

/// A C string as Rust text (lossy; empty for NULL).
///
/// # Safety
/// `ptr` is NULL or a valid NUL-terminated string.
pub unsafe fn text(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: by the caller.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}
