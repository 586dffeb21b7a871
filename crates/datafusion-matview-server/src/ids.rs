//! Identifiers in REST paths, as lance-namespace writes them: the parts of
//! a name joined by a delimiter, `$` unless `?delimiter=` says otherwise
//! (`analytics$daily_sales` is `analytics.daily_sales`). A namespace that
//! is the delimiter alone is the root: every schema of every catalog.
//!
//! Each part is an exact identifier, as if quoted in SQL (case is kept).
//! Parts that could be read as paths (`.`, `..`, or holding `/` or `\`),
//! empty parts and control characters are refused.

use super::ApiError;

/// The delimiter when the request names none.
pub const DEFAULT_DELIMITER: &str = "$";

/// The parts of `id`, checked.
pub fn parse(id: &str, delimiter: &str) -> Result<Vec<String>, ApiError> {
    if delimiter.is_empty() {
        return Err(ApiError::bad_request("the delimiter must not be empty"));
    }
    if id.is_empty() {
        return Err(ApiError::bad_request("the identifier is empty"));
    }
    let parts: Vec<String> = id.split(delimiter).map(str::to_owned).collect();
    for part in &parts {
        let refuse = |why: &str| {
            ApiError::bad_request(format!(
                "invalid identifier \"{}\": {why}",
                id.escape_debug()
            ))
        };
        if part.is_empty() {
            return Err(refuse("it has an empty part"));
        }
        if part == "." || part == ".." {
            return Err(refuse("a part may not be \".\" or \"..\""));
        }
        if part.contains(['/', '\\']) {
            return Err(refuse("a part may not hold \"/\" or \"\\\""));
        }
        if part.chars().any(char::is_control) {
            return Err(refuse("a part may not hold control characters"));
        }
    }
    if parts.len() > 3 {
        return Err(ApiError::bad_request(format!(
            "invalid identifier \"{}\": at most catalog, schema and name",
            id.escape_debug()
        )));
    }
    Ok(parts)
}

/// A namespace: the root (`None`: the delimiter alone), or one or two
/// parts (schema, or catalog and schema).
pub fn parse_namespace(id: &str, delimiter: &str) -> Result<Option<Vec<String>>, ApiError> {
    if id == delimiter {
        return Ok(None);
    }
    let parts = parse(id, delimiter)?;
    if parts.len() > 2 {
        return Err(ApiError::bad_request(format!(
            "invalid namespace \"{}\": at most catalog and schema",
            id.escape_debug()
        )));
    }
    Ok(Some(parts))
}

/// An opaque page token for the position after `key`.
pub fn encode_token(key: &[String]) -> String {
    let json = serde_json::to_vec(key).unwrap_or_default();
    json.iter().map(|b| format!("{b:02x}")).collect()
}

/// The position a page token stands for.
pub fn decode_token(token: &str) -> Result<Vec<String>, ApiError> {
    let invalid = || ApiError::bad_request(format!("invalid page token \"{token}\""));
    if !token.len().is_multiple_of(2) || !token.is_ascii() {
        return Err(invalid());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| invalid())?;
    serde_json::from_slice(&bytes).map_err(|_| invalid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_split_on_the_delimiter_and_refuse_path_like_parts() {
        assert_eq!(
            parse("analytics$daily", "$").unwrap(),
            ["analytics", "daily"]
        );
        assert_eq!(parse("a.b", "$").unwrap(), ["a.b"]);
        assert_eq!(parse("c|s|Name", "|").unwrap(), ["c", "s", "Name"]);
        for bad in ["", "a$$b", "..", "a$..", "a/b", "a\\b", "a\nb", "a$b$c$d"] {
            let e = parse(bad, "$").unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{bad:?}");
        }
        assert_eq!(parse_namespace("$", "$").unwrap(), None);
        assert_eq!(
            parse_namespace("public", "$").unwrap(),
            Some(vec!["public".to_string()])
        );
        assert!(parse_namespace("a$b$c", "$").is_err());
    }

    #[test]
    fn page_tokens_round_trip_and_refuse_garbage() {
        let key = vec!["datafusion".to_string(), "public".into(), "v$1".into()];
        assert_eq!(decode_token(&encode_token(&key)).unwrap(), key);
        assert!(decode_token("zz").is_err());
        assert!(decode_token("abc").is_err());
        assert!(decode_token("7b7d").is_err()); // `{}` is not a key
    }
}
