//! Interval text: one or more `<number><unit>` groups, units `s`, `m`, `h`, `d`
//! (`90s`, `15m`, `6h`, `2d`, `1h30m`). Whole seconds, at least one.

/// Parses an interval into milliseconds.
pub fn parse_interval(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("must be an interval like 90s, 15m, 6h or 2d".into());
    }
    let mut total: i64 = 0;
    let mut digits = String::new();
    let mut last_unit = None;
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let (rank, seconds) = match c {
            'd' => (0, 86_400),
            'h' => (1, 3_600),
            'm' => (2, 60),
            's' => (3, 1),
            _ => {
                return Err(format!(
                    "unexpected {c:?}: use s, m, h or d units, like 90s or 1h30m"
                ));
            }
        };
        if digits.is_empty() {
            return Err(format!("a number must come before {c:?}"));
        }
        if last_unit.is_some_and(|r| r >= rank) {
            return Err("units must run from largest to smallest, each once (like 1h30m)".into());
        }
        last_unit = Some(rank);
        let n: i64 = digits.parse().map_err(|_| "number too large".to_owned())?;
        total = n
            .checked_mul(seconds)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| "interval too large".to_owned())?;
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(format!(
            "{digits:?} has no unit: write {digits}s, {digits}m, {digits}h or {digits}d"
        ));
    }
    if total < 1 {
        return Err("must be at least 1s".into());
    }
    if total > 366 * 86_400 {
        return Err("must be at most 366d".into());
    }
    Ok(total * 1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_combinations() {
        assert_eq!(parse_interval("90s"), Ok(90_000));
        assert_eq!(parse_interval("15m"), Ok(900_000));
        assert_eq!(parse_interval("6h"), Ok(21_600_000));
        assert_eq!(parse_interval("2d"), Ok(172_800_000));
        assert_eq!(parse_interval("1h30m"), Ok(5_400_000));
    }

    #[test]
    fn refuses_what_is_not_an_interval() {
        for bad in [
            "",
            "90",
            "s",
            "0s",
            "1.5h",
            "1m1h",
            "1h1h",
            "-5m",
            "5 m",
            "400d",
            "99999999999999999999s",
        ] {
            assert!(parse_interval(bad).is_err(), "{bad:?}");
        }
    }
}
