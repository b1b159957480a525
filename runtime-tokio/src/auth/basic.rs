//! HTTP Basic credentials (`Authorization: Basic base64(name:password)`), the scheme the
//! original Narad's clients send. Parsing untrusted header bytes: bounded, never panics, and an
//! answer says what was wrong without echoing the secret.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Longest `Authorization` value read (a 64-byte name and a 1,024-byte password fit).
pub const MAX_AUTHORIZATION_BYTES: usize = 2_048;

/// A name and a password, as the client sent them.
#[derive(PartialEq, Eq)]
pub struct BasicCredentials {
    pub name: String,
    pub password: String,
}

impl std::fmt::Debug for BasicCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BasicCredentials({:?}, <password>)", self.name)
    }
}

/// The credentials of an `Authorization` header value, or why it holds none.
pub fn parse(value: &[u8]) -> Result<BasicCredentials, &'static str> {
    if value.len() > MAX_AUTHORIZATION_BYTES {
        return Err("the Authorization header is too long");
    }
    let text = std::str::from_utf8(value).map_err(|_| "the Authorization header is not text")?;
    let (scheme, encoded) = text.trim().split_once(' ').ok_or("use HTTP Basic authentication")?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err("use HTTP Basic authentication");
    }
    let decoded = STANDARD
        .decode(encoded.trim_start())
        .map_err(|_| "the Basic credentials are not valid base64")?;
    let decoded = String::from_utf8(decoded).map_err(|_| "the Basic credentials are not UTF-8")?;
    let (name, password) =
        decoded.split_once(':').ok_or("the Basic credentials have no `:` after the name")?;
    if name.is_empty() {
        return Err("the Basic credentials name no user");
    }
    Ok(BasicCredentials { name: name.to_string(), password: password.to_string() })
}

/// The header value a client sends for `name` and `password`.
pub fn header_value(name: &str, password: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{name}:{password}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_round_trip_and_the_password_may_hold_colons() {
        let value = header_value("ann", "p:a:ss word");
        let parsed = parse(value.as_bytes()).expect("parses");
        assert_eq!(parsed, BasicCredentials { name: "ann".into(), password: "p:a:ss word".into() });
        assert!(!format!("{parsed:?}").contains("ss word"), "Debug hides the password");
        let lower = value.replacen("Basic", "basic", 1);
        assert_eq!(parse(lower.as_bytes()).expect("scheme is case-insensitive").name, "ann");
    }

    #[test]
    fn malformed_headers_are_refused_with_a_reason() {
        for (value, reason) in [
            ("Bearer abc", "use HTTP Basic"),
            ("Basic", "use HTTP Basic"),
            ("Basic !!!", "base64"),
            ("Basic YW5u", "no `:`"),       // "ann"
            ("Basic OnB3", "name no user"), // ":pw"
        ] {
            let error = parse(value.as_bytes()).expect_err(value);
            assert!(error.contains(reason), "{value}: {error}");
        }
        let long = format!("Basic {}", "A".repeat(MAX_AUTHORIZATION_BYTES));
        assert!(parse(long.as_bytes()).is_err());
        assert!(parse(&[0xff, 0xfe]).is_err());
    }
}
