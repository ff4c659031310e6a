//! Which field of a cron expression the parser rejected, and why, in words a user can act on:
//! the field's name, the value written and what the field takes. Also consulted when the parser
//! accepts an expression, which it does with a name in a field that does not take it (a month's
//! name for a day of week); what it cannot explain is left to the parser's own message.

/// A field of a cron expression: its name, its range and the names it takes for numbers.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    /// What the field takes, as the message says it.
    takes: &'static str,
    /// The three-letter names the field takes (case-insensitive), if any.
    names: &'static [&'static str],
    /// Letters that are no name but valid on their own (`L`, `W`).
    letters: &'static [&'static str],
}

const SECOND: Field = field("second", 0, 59, "0-59");
const MINUTE: Field = field("minute", 0, 59, "0-59");
const HOUR: Field = field("hour", 0, 23, "0-23");
const DAY_OF_MONTH: Field = Field {
    letters: &["L", "W", "LW"],
    ..field("day of month", 1, 31, "1-31 (or `L` for the last day)")
};
const MONTH: Field = Field {
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    ..field("month", 1, 12, "1-12 or the names JAN-DEC")
};
const DAY_OF_WEEK: Field = Field {
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    letters: &["L"],
    ..field(
        "day of week",
        0,
        7,
        "0-7 (0 and 7 are Sunday, 1 is Monday) or the names SUN, MON, TUE, WED, THU, FRI, SAT",
    )
};
const YEAR: Field = field("year", 1, 9999, "a year such as 2030");

const fn field(name: &'static str, min: u32, max: u32, takes: &'static str) -> Field {
    Field {
        name,
        min,
        max,
        takes,
        names: &[],
        letters: &[],
    }
}

/// The fields of an expression with `count` fields, as the runtime's parser reads them.
fn layout(count: usize) -> Option<&'static [Field]> {
    const FIVE: [Field; 5] = [MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK];
    const SIX: [Field; 6] = [SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK];
    const SEVEN: [Field; 7] = [SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK, YEAR];
    match count {
        5 => Some(&FIVE),
        6 => Some(&SIX),
        7 => Some(&SEVEN),
        _ => None,
    }
}

/// The first field of `expr` with a value out of its range or a name it does not take, said
/// in a sentence; `None` when no field is at fault that way (e.g. a wrong number of fields).
pub(super) fn diagnose(expr: &str) -> Option<String> {
    let parts: Vec<&str> = expr.split_whitespace().collect();
    let fields = layout(parts.len())?;
    parts
        .iter()
        .zip(fields)
        .enumerate()
        .find_map(|(i, (part, field))| check_part(part, field, i + 1))
}

/// A field's text: a list of items, each `*`, a value or a range, with an optional `/step`.
fn check_part(part: &str, field: &Field, position: usize) -> Option<String> {
    part.split(',').find_map(|item| {
        let base = item.split_once('/').map_or(item, |(base, _step)| base);
        let base = base.split_once('#').map_or(base, |(base, _nth)| base);
        let (start, end) = base.split_once('-').unwrap_or((base, ""));
        [start, end]
            .into_iter()
            .filter(|v| !v.is_empty() && *v != "*" && *v != "?")
            .find_map(|value| check_value(value, field, position))
    })
}

/// One value: a number in range, or a name or letter the field takes.
fn check_value(value: &str, field: &Field, position: usize) -> Option<String> {
    let whose = format!(
        "the {} ({} field), which takes {}",
        field.name,
        ordinal(position),
        field.takes
    );
    if value.bytes().all(|b| b.is_ascii_digit()) {
        let in_range = value
            .parse::<u32>()
            .is_ok_and(|n| (field.min..=field.max).contains(&n));
        return (!in_range).then(|| format!("{value} is out of range for {whose}"));
    }
    if !value.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None; // `5L`, `15W` and the like: the parser's message says more
    }
    let upper = value.to_ascii_uppercase();
    let known = |v: &str| field.names.contains(&v) || field.letters.contains(&v);
    // `FRIL`: the last Friday of the month.
    let last = field.letters.contains(&"L") && upper.strip_suffix('L').is_some_and(known);
    if known(&upper) || last {
        return None;
    }
    let mut msg = format!("`{value}` is not a value of {whose}");
    match upper.get(..3).filter(|prefix| field.names.contains(prefix)) {
        Some(name) => msg.push_str(&format!(": did you mean `{name}`?")),
        None if field.names.is_empty() => {
            msg.push_str(" (names are only for months and days of week)")
        }
        None => {}
    }
    Some(msg)
}

fn ordinal(n: usize) -> String {
    let suffix = match n {
        1 => "st",
        2 => "nd",
        3 => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::diagnose;

    #[test]
    fn names_the_field_the_value_and_the_range() {
        assert_eq!(
            diagnose("0 25 * * *").as_deref(),
            Some("25 is out of range for the hour (2nd field), which takes 0-23")
        );
        assert_eq!(
            diagnose("60 * * * *").as_deref(),
            Some("60 is out of range for the minute (1st field), which takes 0-59")
        );
        assert_eq!(
            diagnose("0 0 0 * *").as_deref(),
            Some(
                "0 is out of range for the day of month (3rd field), which takes 1-31 (or `L` \
                 for the last day)"
            )
        );
        let month = diagnose("0 0 1 1-13 *").unwrap_or_default();
        assert!(
            month.starts_with("13 is out of range for the month (4th field)"),
            "{month}"
        );
        let dow = diagnose("0 0 * * 8").unwrap_or_default();
        assert!(
            dow.starts_with("8 is out of range for the day of week (5th field)"),
            "{dow}"
        );
        let seconds = diagnose("61 0 3 * * *").unwrap_or_default();
        assert!(
            seconds.starts_with("61 is out of range for the second (1st field)"),
            "{seconds}"
        );
        let step = diagnose("*/5 24-2/2 * * *").unwrap_or_default();
        assert!(
            step.starts_with("24 is out of range for the hour"),
            "{step}"
        );
        let huge = diagnose("0 99999999999 * * *").unwrap_or_default();
        assert!(
            huge.starts_with("99999999999 is out of range for the hour"),
            "{huge}"
        );
    }

    #[test]
    fn suggests_the_three_letter_name() {
        let dow = diagnose("0 9 * * MONDAY").unwrap_or_default();
        assert_eq!(
            dow,
            "`MONDAY` is not a value of the day of week (5th field), which takes 0-7 (0 and 7 are \
             Sunday, 1 is Monday) or the names SUN, MON, TUE, WED, THU, FRI, SAT: did you mean \
             `MON`?"
        );
        let range = diagnose("0 9 * * monday-friday").unwrap_or_default();
        assert!(
            range.contains("`monday`") && range.ends_with("did you mean `MON`?"),
            "{range}"
        );
        let month = diagnose("0 0 1 January *").unwrap_or_default();
        assert!(
            month.starts_with("`January` is not a value of the month"),
            "{month}"
        );
        assert!(month.ends_with("did you mean `JAN`?"), "{month}");
        let hour = diagnose("0 nine * * *").unwrap_or_default();
        assert!(
            hour.ends_with("(names are only for months and days of week)"),
            "{hour}"
        );
        let unknown = diagnose("0 9 * * XYZ").unwrap_or_default();
        assert!(unknown.ends_with("THU, FRI, SAT"), "{unknown}");
    }

    #[test]
    fn leaves_valid_fields_and_other_mistakes_alone() {
        for ok in [
            "0 3 * * *",
            "*/10 * * * * *",
            "0 0 L * FRIL",
            "0 0 LW * *",
            "0 0 * * MON#2",
            "0 0 * JAN-MAR SUN-SAT",
            "0 0 ? * ?",
            "0 0 0 1 1 * 2030",
            "0 3 * *",
            "@daily",
            "0 0 15W * *",
        ] {
            assert_eq!(diagnose(ok), None, "{ok}");
        }
    }
}
