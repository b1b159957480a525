//! JSON request bodies are JSON objects, and so is every struct nested in them (docs/design.md
//! §2). serde's derived `Deserialize` for a struct also accepts a JSON array of its fields in
//! order, so `["t",3,null]` would create topic `t`; `Object` refuses that: it asks the parser for
//! a map, never a sequence.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};

use super::ApiError;

/// A `T` that was written as a JSON object.
#[derive(Debug, PartialEq)]
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ObjectVisitor(PhantomData))
    }
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = Object<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Object<T>, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Object)
    }
}

/// Parses `body` as a JSON object holding a `T`; anything else is a 400 starting with `what`.
pub fn object<'a, T: Deserialize<'a>>(body: &'a [u8], what: &str) -> Result<T, ApiError> {
    serde_json::from_slice::<Object<T>>(body)
        .map(|Object(value)| value)
        .map_err(|e| ApiError::bad_request(format!("invalid {what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        a: u32,
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        name: String,
        inner: Option<Object<Inner>>,
    }

    #[test]
    fn objects_parse_as_before() {
        let outer: Outer = object(br#" {"name":"t","inner":{"a":3}} "#, "body").expect("object");
        assert_eq!(outer.name, "t");
        assert_eq!(outer.inner.map(|Object(i)| i), Some(Inner { a: 3 }));
        let err = object::<Outer>(br#"{"name":"t","extra":1}"#, "body").expect_err("unknown");
        assert!(format!("{err:?}").contains("unknown field"), "{err:?}");
    }

    #[test]
    fn arrays_are_refused_at_the_top_and_inside() {
        for body in [&br#"["t",null]"#[..], br#"{"name":"t","inner":[3]}"#, b"\"t\"", b"3"] {
            let err = object::<Outer>(body, "body").expect_err("not an object");
            assert_eq!(err.status(), StatusCode::BAD_REQUEST);
            assert!(format!("{err:?}").contains("a JSON object"), "{err:?}");
        }
    }
}
