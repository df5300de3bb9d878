//! Command-line `--set KEY=VALUE` overrides applied to a scene table.

use super::{SceneError, KEYS};

/// Apply one `--set KEY=VALUE`.
///
/// # Errors
/// Unknown keys list the valid ones; out-of-range array indices say how many there are.
pub fn apply_override(table: &mut toml::Table, key: &str, value: &str) -> Result<(), SceneError> {
    let err = |message: String| SceneError { file: "--set".into(), line: None, key: key.into(), message };
    let parts: Vec<&str> = key.split('.').collect();
    let pattern: Vec<String> = parts.iter().map(|p| if p.parse::<usize>().is_ok() { "N".to_string() } else { (*p).to_string() }).collect();
    let pattern = pattern.join(".");
    if !KEYS.iter().any(|k| k.key == pattern) {
        let valid: Vec<&str> = KEYS.iter().map(|k| k.key).collect();
        let hint = KEYS
            .iter()
            .map(|k| (edit_distance(k.key, &pattern), k.key))
            .min()
            .filter(|(d, _)| *d <= 3)
            .map(|(_, k)| format!("did you mean {k}? "))
            .unwrap_or_default();
        return Err(err(format!("unknown key; {hint}valid keys are: {} (N = obstacle or probe index from 0)", valid.join(", "))));
    }
    let parsed: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {value}")) {
        Ok(mut t) => t.remove("v").unwrap_or(toml::Value::String(value.into())),
        Err(_) => toml::Value::String(value.to_string()),
    };
    let mut cur = table;
    for (depth, p) in parts.iter().enumerate() {
        let last = depth + 1 == parts.len();
        if let Ok(idx) = p.parse::<usize>() {
            // Arrays of tables (obstacles, probes) are walked into below, after their name.
            return Err(err(format!("internal: unexpected index {idx}")));
        }
        if last {
            cur.insert((*p).to_string(), parsed);
            return Ok(());
        }
        // Next part an index? Then this is an array of tables (obstacles, probes).
        if let Some(next) = parts.get(depth + 1) {
            if let Ok(idx) = next.parse::<usize>() {
                let Some(toml::Value::Array(arr)) = cur.get_mut(*p) else {
                    return Err(err(format!("the scene has no \"{p}\" entries to index")));
                };
                let len = arr.len();
                let Some(toml::Value::Table(elem)) = arr.get_mut(idx) else {
                    let one = p.strip_suffix('s').unwrap_or(p);
                    return Err(err(match len {
                        0 => format!("index {idx} is out of range: the scene has no {p}"),
                        1 => format!("index {idx} is out of range: the scene has one {one} (index 0)"),
                        _ => format!("index {idx} is out of range: the scene has {len} {p} (indices 0 to {})", len - 1),
                    }));
                };
                let rest = parts[depth + 2..].join(".");
                if rest.is_empty() {
                    return Err(err("give a field of the element, e.g. obstacles.0.radius".into()));
                }
                return set_in(elem, &rest, parsed).map_err(err);
            }
        }
        let entry = cur.entry((*p).to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::String(s) = entry {
            // A face written as a bare string gets its fields.
            let mut t = toml::Table::new();
            t.insert("type".into(), toml::Value::String(s.clone()));
            *entry = toml::Value::Table(t);
        }
        let toml::Value::Table(t) = entry else {
            return Err(err(format!("\"{p}\" is not a table")));
        };
        cur = t;
    }
    Ok(())
}

/// Levenshtein distance, for "did you mean" hints.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn set_in(t: &mut toml::Table, dotted: &str, v: toml::Value) -> Result<(), String> {
    let mut cur = t;
    let parts: Vec<&str> = dotted.split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            cur.insert((*p).to_string(), v);
            return Ok(());
        }
        let e = cur.entry((*p).to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(n) = e else {
            return Err(format!("\"{p}\" is not a table"));
        };
        cur = n;
    }
    Ok(())
}
