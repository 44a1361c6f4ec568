//! Page cursors and list filters. Cursors are opaque, and bound to the list they were
//! issued for. A cursor carries the
//! last row of its page and a digest of the list's filters; presented under other
//! filters, or altered, it is refused (`400 invalid_cursor`) instead of silently paging
//! through another list. The page size is not a filter: it may change between pages.

use studio_contract::{
    error::{ApiError, Code},
    secret::{digest, hex, unhex},
};

/// Bytes of the filters' SHA-256 a cursor keeps: enough to tell lists apart.
const FILTER_DIGEST: usize = 8;

/// The cursor after `position` in the list `filters` describes (a canonical text of every
/// filter, e.g. `runs|schedule=…|status=…`).
pub(crate) fn encode(filters: &str, position: &str) -> String {
    let mut bytes = digest(filters)[..FILTER_DIGEST].to_vec();
    bytes.extend_from_slice(position.as_bytes());
    hex(&bytes)
}

/// The position `cursor` names, if it was issued for the list `filters` describes.
pub(crate) fn decode(cursor: &str, filters: &str) -> Result<String, ApiError> {
    let bytes = unhex(cursor).ok_or_else(|| invalid("is not one this server issued"))?;
    if bytes.len() < FILTER_DIGEST {
        return Err(invalid("is not one this server issued"));
    }
    let (fingerprint, position) = bytes.split_at(FILTER_DIGEST);
    if fingerprint != &digest(filters)[..FILTER_DIGEST] {
        return Err(invalid(
            "belongs to a list with other filters; start again without it",
        ));
    }
    String::from_utf8(position.to_vec()).map_err(|_| invalid("is not one this server issued"))
}

/// The cursor after the row at `(at, id)` of a list ordered by an instant and an id.
pub(crate) fn encode_keyset(filters: &str, (at, id): (i64, &str)) -> String {
    encode(filters, &format!("{at}:{id}"))
}

/// The `(at, id)` position `cursor` names, if it was issued for the list `filters`
/// describes.
pub(crate) fn decode_keyset(cursor: &str, filters: &str) -> Result<(i64, String), ApiError> {
    let position = decode(cursor, filters)?;
    position
        .split_once(':')
        .and_then(|(at, id)| Some((at.parse().ok()?, id.to_owned())))
        .ok_or_else(|| invalid("is not one this server issued"))
}

/// The words of a comma-separated filter (`status=failed,timed_out`), each read by
/// `parse`, without repeats; an unknown one is `400 bad_request` listing the `known`
/// words of the filter `what`.
pub(crate) fn words<T: PartialEq>(
    text: Option<&str>,
    what: &str,
    known: &[&str],
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Vec<T>, ApiError> {
    let mut out = Vec::new();
    for word in text
        .unwrap_or_default()
        .split(',')
        .filter(|w| !w.is_empty())
    {
        let value = parse(word).ok_or_else(|| {
            ApiError::new(
                Code::BadRequest,
                format!("unknown {what} {word:?} ({})", known.join(", ")),
            )
        })?;
        if !out.contains(&value) {
            out.push(value);
        }
    }
    Ok(out)
}

fn invalid(why: &str) -> ApiError {
    ApiError::new(Code::InvalidCursor, format!("the cursor {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_pages_only_the_list_it_came_from() {
        let list = "runs|schedule=a|status=failed|since=|until=";
        let cursor = encode(list, "17:run-1");
        assert_eq!(decode(&cursor, list).expect("same list"), "17:run-1");
        let other = "runs|schedule=b|status=failed|since=|until=";
        let err = decode(&cursor, other).expect_err("other filters");
        assert_eq!(err.code, Code::InvalidCursor);
        for bad in ["zz", "", "00", &cursor[..cursor.len() - 1]] {
            assert_eq!(
                decode(bad, list).expect_err(bad).code,
                Code::InvalidCursor,
                "{bad:?}"
            );
        }
    }
}
