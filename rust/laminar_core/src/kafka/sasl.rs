//! The SASL rules of a Kafka client that are protocol, not I/O (docs/protocol.md §8): the
//! OAUTHBEARER initial client response (RFC 7628 §3.1 with KIP-342's extensions, as Apache
//! Kafka's `OAuthBearerClientInitialResponse` and librdkafka write it), what the broker's answer
//! to it means, and when a token is refreshed and a session re-authenticated (KIP-368).
//!
//! The token comes from the caller (the user's `oauth_cb`, an OIDC token endpoint), the clock as
//! arguments; nothing here reads a clock or touches a socket.

use super::{KafkaError, KafkaResult};

/// RFC 7628's key/value separator (`kvsep`, 0x01).
const KVSEP: u8 = 0x01;

/// What a client sends after the broker answered its initial response with an error challenge
/// (RFC 7628 §3.2.3: a lone `kvsep`); the broker then fails the exchange with its reason.
pub const OAUTHBEARER_FAILURE_ACK: &[u8] = &[KVSEP];

/// The OAUTHBEARER initial client response: the GS2 header without an authorization id (`n,,`,
/// as librdkafka sends it), `auth=Bearer <token>`, then each SASL extension `key=value`, each
/// item followed by `kvsep` and the message closed by one more.
///
/// Refused (an error naming the part, never the token's text): a token that is not an RFC 6750
/// `b64token` (a JWT is one), an extension key that is not letters only or is the reserved
/// `auth`, an extension value outside RFC 7628's `value` characters.
pub fn oauthbearer_initial_response(
    token: &str,
    extensions: &[(String, String)],
) -> KafkaResult<Vec<u8>> {
    if !is_b64token(token) {
        return Err(KafkaError::new(
            "the OAUTHBEARER token is not an RFC 6750 bearer token (letters, digits and \
             -._~+/ followed by optional '=' padding; a JWT is one)",
        ));
    }
    let mut out = Vec::with_capacity(token.len() + 32);
    out.extend_from_slice(b"n,,");
    out.push(KVSEP);
    out.extend_from_slice(b"auth=Bearer ");
    out.extend_from_slice(token.as_bytes());
    out.push(KVSEP);
    for (key, value) in extensions {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) || key == "auth" {
            return Err(KafkaError::new(format!(
                "SASL extension key {key:?} is not allowed (letters only, and not 'auth')"
            )));
        }
        if value.is_empty() || !value.bytes().all(is_extension_value_byte) {
            return Err(KafkaError::new(format!(
                "SASL extension {key:?} has a value with characters RFC 7628 does not allow \
                 (printable ASCII, space, tab, CR, LF)"
            )));
        }
        out.extend_from_slice(key.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
        out.push(KVSEP);
    }
    out.push(KVSEP);
    Ok(out)
}

/// RFC 6750's `b64token`: `1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="`.
fn is_b64token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

/// RFC 7628's `value`: `*(VCHAR / SP / HTAB / CR / LF)`.
fn is_extension_value_byte(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// What the broker's answer to the initial response means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OAuthAnswer {
    /// An empty answer: the token was accepted.
    Accepted,
    /// An error challenge (RFC 7628 §3.2.2: a JSON object with the `status` and, optionally,
    /// `scope` and `openid-configuration`): the client sends [`OAUTHBEARER_FAILURE_ACK`] and the
    /// broker fails the exchange. `status` is the challenge's status (the whole challenge when
    /// it is not the JSON the RFC describes); it never holds the token.
    Refused { status: String },
}

/// The meaning of the broker's answer to the OAUTHBEARER initial response.
pub fn oauthbearer_answer(answer: &[u8]) -> OAuthAnswer {
    if answer.is_empty() {
        return OAuthAnswer::Accepted;
    }
    let text = String::from_utf8_lossy(answer).into_owned();
    let status = serde_json::from_slice::<serde_json::Value>(answer)
        .ok()
        .and_then(|v| {
            let status = v.get("status")?.as_str()?.to_owned();
            Some(match v.get("scope").and_then(|s| s.as_str()) {
                Some(scope) => format!("{status} (scope {scope})"),
                None => status,
            })
        })
        .unwrap_or(text);
    OAuthAnswer::Refused { status }
}

/// Whether a token obtained at `obtained_ms` that expires at `expiry_ms` is due for a refresh at
/// `now_ms`: at 80 % of its lifetime, librdkafka's rule (so that a session re-authenticated near
/// its end starts with a token that still has a fifth of its life), or once expired.
pub fn token_refresh_due(now_ms: i64, obtained_ms: i64, expiry_ms: i64) -> bool {
    let lifetime = expiry_ms.saturating_sub(obtained_ms).max(0);
    now_ms >= obtained_ms.saturating_add(lifetime / 5 * 4) || now_ms >= expiry_ms
}

/// What a connection authenticated at `authenticated_ms` with a broker-given session lifetime
/// (SaslAuthenticate v1's `session_lifetime_ms`, KIP-368; 0: no limit) must do before its next
/// request at `now_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStep {
    /// Send the request.
    Send,
    /// Re-authenticate on the same connection first (SaslHandshake + SaslAuthenticate): the
    /// session is past 85 % of its lifetime, the earliest point Apache Kafka's own client picks.
    Reauthenticate,
    /// The session has expired: the broker closes the connection on any request, a
    /// re-authentication included, so connect again.
    Reconnect,
}

/// The step before a request (see [`SessionStep`]).
pub fn session_step(now_ms: i64, authenticated_ms: i64, session_lifetime_ms: i64) -> SessionStep {
    if session_lifetime_ms <= 0 {
        return SessionStep::Send;
    }
    let expiry = authenticated_ms.saturating_add(session_lifetime_ms);
    if now_ms >= expiry {
        return SessionStep::Reconnect;
    }
    if now_ms >= authenticated_ms.saturating_add(session_lifetime_ms / 20 * 17) {
        return SessionStep::Reauthenticate;
    }
    SessionStep::Send
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_initial_response_is_the_gs2_header_the_token_and_the_extensions() {
        let token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJsYW1pbmFyIn0.c2ln";
        let bytes = oauthbearer_initial_response(token, &[]).unwrap();
        assert_eq!(
            bytes,
            format!("n,,\x01auth=Bearer {token}\x01\x01").into_bytes()
        );
        let with = ext(&[("logicalCluster", "lkc-1"), ("traceId", "a b")]);
        let bytes = oauthbearer_initial_response(token, &with).unwrap();
        assert_eq!(
            bytes,
            format!("n,,\x01auth=Bearer {token}\x01logicalCluster=lkc-1\x01traceId=a b\x01\x01")
                .into_bytes()
        );
    }

    #[test]
    fn what_rfc_7628_forbids_is_refused_without_quoting_the_token() {
        let secret = "not a token";
        let err = oauthbearer_initial_response(secret, &[]).unwrap_err();
        assert!(!err.0.contains(secret), "{err}");
        assert!(oauthbearer_initial_response("", &[]).is_err());
        assert!(oauthbearer_initial_response("===", &[]).is_err());
        assert!(oauthbearer_initial_response("abc==", &[]).is_ok());
        for (key, value) in [
            ("auth", "x"),
            ("a1", "x"),
            ("", "x"),
            ("k", "\u{1}"),
            ("k", ""),
        ] {
            assert!(
                oauthbearer_initial_response("t", &ext(&[(key, value)])).is_err(),
                "{key:?}={value:?}"
            );
        }
    }

    #[test]
    fn an_empty_answer_accepts_a_challenge_refuses_with_its_status() {
        assert_eq!(oauthbearer_answer(b""), OAuthAnswer::Accepted);
        assert_eq!(
            oauthbearer_answer(br#"{"status":"invalid_token"}"#),
            OAuthAnswer::Refused {
                status: "invalid_token".into()
            }
        );
        assert_eq!(
            oauthbearer_answer(br#"{"status":"insufficient_scope","scope":"kafka"}"#),
            OAuthAnswer::Refused {
                status: "insufficient_scope (scope kafka)".into()
            }
        );
        assert_eq!(
            oauthbearer_answer(b"no json"),
            OAuthAnswer::Refused {
                status: "no json".into()
            }
        );
        assert_eq!(OAUTHBEARER_FAILURE_ACK, b"\x01");
    }

    #[test]
    fn a_token_is_refreshed_at_four_fifths_of_its_life() {
        assert!(!token_refresh_due(0, 0, 10_000));
        assert!(!token_refresh_due(7_999, 0, 10_000));
        assert!(token_refresh_due(8_000, 0, 10_000));
        assert!(token_refresh_due(20_000, 0, 10_000));
        // already expired when obtained (a clock ahead of the issuer's): refreshed at once
        assert!(token_refresh_due(5, 10, 0));
    }

    #[test]
    fn a_session_is_reauthenticated_past_85_percent_and_reconnected_once_expired() {
        assert_eq!(session_step(1_000_000, 0, 0), SessionStep::Send);
        assert_eq!(session_step(8_499, 0, 10_000), SessionStep::Send);
        assert_eq!(session_step(8_500, 0, 10_000), SessionStep::Reauthenticate);
        assert_eq!(session_step(9_999, 0, 10_000), SessionStep::Reauthenticate);
        assert_eq!(session_step(10_000, 0, 10_000), SessionStep::Reconnect);
        assert_eq!(
            session_step(i64::MAX - 1, i64::MAX - 10, i64::MAX),
            SessionStep::Send
        );
    }
}
