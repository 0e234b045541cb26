//! Durations as specs write them (`10s`, `1h30m`, `500ms`), in milliseconds.

/// Parses `1h30m`, `10s`, `500ms` into milliseconds (units `ms`, `s`, `m`, `h`, `d`).
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("it is empty".into());
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("expected a number at `{rest}`"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|_| "number too large".to_owned())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(format!("`{number}` has no unit")),
            other => return Err(format!("unknown unit `{other}`")),
        };
        rest = &rest[unit_len..];
        total = number
            .checked_mul(factor)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| "duration too large".to_owned())?;
    }
    if total == 0 {
        return Err("it must be greater than zero".into());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(10_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("ten minutes").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5y").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }
}
