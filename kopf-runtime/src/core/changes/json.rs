//! JSON text measures and comparison shared by the annotations' format rules: the length of a
//! string as `serde_json` writes it (so that a stored value is cut to fit before it is written),
//! and equality of values that survives a float's round trip through JSON text.

use serde_json::Value;

/// The length of `text` as a JSON string, quotes included (as `serde_json` escapes it).
#[must_use]
pub(crate) fn json_str_len(text: &str) -> usize {
    2 + text.chars().map(escaped_len).sum::<usize>()
}

/// The length of one character in a JSON string.
pub(crate) fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        c if u32::from(c) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Whether two values are the same, a float and its round trip through JSON text included
/// (`serde_json` may parse a float it wrote one unit in the last place off).
#[must_use]
pub(crate) fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() && y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            (x - y).abs() <= f64::EPSILON * x.abs().max(y.abs())
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn floats_survive_their_round_trip_and_types_matter() {
        assert!(same(&json!(0.1), &json!(0.1 + f64::EPSILON / 16.0)));
        assert!(same(&json!({"a": [1, 2.5]}), &json!({"a": [1, 2.5]})));
        assert!(!same(&json!(0.1), &json!(0.2)));
        assert!(!same(&json!(3), &json!(3.0)));
        assert!(!same(&json!({"a": 1}), &json!({"b": 1})));
        assert!(!same(&json!([1]), &json!([1, 2])));
    }

    proptest! {
        #[test]
        fn string_lengths_agree_with_serde_json(text in "\\PC{0,8}|[\"\\\\\u{0}-\u{1f}a\u{e9}]{0,6}") {
            let json = serde_json::to_string(&text).unwrap();
            prop_assert_eq!(json_str_len(&text), json.len());
            prop_assert_eq!(text.chars().map(escaped_len).sum::<usize>(), json.len() - 2);
        }
    }
}
