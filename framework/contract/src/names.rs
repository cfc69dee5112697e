//! Enumerations named in flags and specs: the value of a name, and the name
//! of a value, from one table of both.

/// The value of `all` named `s`, or an error saying it is not `what`.
pub(crate) fn named<T: Copy>(all: &[(&str, T)], s: &str, what: &str) -> Result<T, String> {
    all.iter()
        .find(|(n, _)| *n == s)
        .map(|(_, e)| *e)
        .ok_or_else(|| format!("'{s}' is not {what}"))
}

/// The name of `v` in `all` (empty where it has none).
pub(crate) fn name_of<T: Copy + PartialEq>(all: &[(&'static str, T)], v: T) -> &'static str {
    all.iter().find(|(_, x)| *x == v).map_or("", |(n, _)| n)
}
