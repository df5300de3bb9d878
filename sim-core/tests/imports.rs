//! Keeps the modules of both crates (sim-core and app) free of import circles.
//!
//! Each `.rs` file is one node (`lib.rs`, `main.rs` and `mod.rs` stand for their folder; an inline
//! `mod x { }` belongs to its file). File A imports file B when the non-test code of A names an item
//! that B defines: through a `use` tree, a qualified path in code or attributes (`crate::x::Y`,
//! `super::Y`, `child::Y`, `alias::Y`), or a bare name that a glob `use m::*` of one of our modules
//! brought in. Names are followed through `use` / `pub use` re-exports and globs to the file that
//! defines them, so a re-export does not hide where the item really lives. Comments, string and char
//! literals are skipped, and items under `#[cfg(test)]` are dropped: tests may import freely.
//!
//! A child naming its own ancestor (`super::Thing`, `crate::Thing` from a submodule) is allowed, so
//! such imports are left out when looking for circles (sets of files that all reach each other).
//! They are reported only when the circle they close leaves the ancestor's folder: then an
//! unrelated file sits in it.
//!
//! This is a token scanner, not a Rust parser: it knows just enough syntax for our own code.
//! `ESOFLOW_IMPORTS_ROOT=dir` checks another workspace, `ESOFLOW_IMPORTS_EDGES=1` prints the
//! import graph (run with `--nocapture`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Keywords whose next identifier names an item defined in the enclosing module.
const ITEM_KEYWORDS: [&str; 8] = ["fn", "struct", "enum", "trait", "type", "const", "static", "union"];

/// A token and the line it is on.
type Token = (String, usize);

/// Imports between files: (from, to) -> the (line in `from`, item named) that make them.
type Imports = BTreeMap<(String, String), BTreeSet<(usize, String)>>;

fn is_ident(t: &str) -> bool {
    let mut chars = t.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The text of token `i`, or "" past the end (saves a bounds check at every look-ahead).
fn text(toks: &[Token], i: usize) -> &str {
    toks.get(i).map_or("", |t| t.0.as_str())
}

/// Splits source into identifiers, `::` and single other characters, each with its line;
/// whitespace, comments, string and char literals are skipped.
fn tokenize(src: &str) -> Vec<Token> {
    let s: Vec<char> = src.chars().collect();
    let n = s.len();
    let at = |i: usize, p: &str| p.chars().enumerate().all(|(k, c)| s.get(i + k) == Some(&c));
    let (mut toks, mut line, mut i) = (Vec::new(), 1, 0);
    while i < n {
        let skip = if at(i, "//") {
            Some((i..n).find(|&j| s[j] == '\n').unwrap_or(n))
        } else if at(i, "/*") {
            let (mut depth, mut j) = (1, i + 2); // block comments nest
            while j < n && depth > 0 {
                let step = i32::from(at(j, "/*")) - i32::from(at(j, "*/"));
                (depth, j) = (depth + step, j + 1 + usize::from(step != 0));
            }
            Some(j)
        } else if s[i] == '"' {
            let mut j = i + 1;
            while j < n && s[j] != '"' {
                j += 1 + usize::from(s[j] == '\\');
            }
            Some(j + 1)
        } else if s[i] == '\'' {
            char_literal_end(&s, i) // None: a lifetime, kept as a token
        } else {
            raw_string_end(&s, i)
        };
        if let Some(end) = skip.map(|end| end.min(n)) {
            line += s[i..end].iter().filter(|c| **c == '\n').count();
            i = end;
            continue;
        }
        let c = s[i];
        let len = if c.is_ascii_alphabetic() || c == '_' {
            1 + s[i + 1..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_').count()
        } else {
            1 + usize::from(at(i, "::"))
        };
        if c == '\n' {
            line += 1;
        } else if !c.is_whitespace() {
            toks.push((s[i..i + len].iter().collect(), line));
        }
        i += len;
    }
    toks
}

/// End (exclusive) of a raw string `r#"…"#` / `br"…"` starting at `i`, if one starts there.
fn raw_string_end(s: &[char], i: usize) -> Option<usize> {
    let r = if s[i] == 'b' { i + 1 } else { i };
    let hashes = s.iter().skip(r + 1).take_while(|c| **c == '#').count();
    let in_word = i > 0 && (s[i - 1].is_alphanumeric() || s[i - 1] == '_');
    if in_word || s.get(r) != Some(&'r') || s.get(r + 1 + hashes) != Some(&'"') {
        return None;
    }
    let closes = |k: usize| s[k] == '"' && (1..=hashes).all(|d| s.get(k + d) == Some(&'#'));
    Some((r + 2 + hashes..s.len()).find(|&k| closes(k)).map_or(s.len(), |k| k + 1 + hashes))
}

/// End (exclusive) of a char literal (`'x'`, `'\n'`, `'\u{1F600}'`) starting at `i`; None for a lifetime.
fn char_literal_end(s: &[char], i: usize) -> Option<usize> {
    match (s.get(i + 1)?, s.get(i + 2)?) {
        ('\\', &c) if c != '\n' => (i + 3..s.len()).find(|&k| s[k] == '\'').map(|k| k + 1),
        (&c, '\'') if c != '\\' && c != '\'' => Some(i + 3),
        _ => None,
    }
}

/// Index of the token closing the bracket opened at `i` (the last token if it is never closed).
fn close_of(toks: &[Token], i: usize, open: &str, close: &str) -> usize {
    let mut depth = 0;
    for (j, t) in toks.iter().enumerate().skip(i) {
        depth += i32::from(t.0 == open) - i32::from(t.0 == close);
        if depth == 0 && t.0 == close {
            return j;
        }
    }
    toks.len().saturating_sub(1)
}

/// Drops every item under `#[cfg(test)]`; also returns the names of the `mod x;` so dropped.
fn drop_cfg_test(toks: Vec<Token>) -> (Vec<Token>, HashSet<String>) {
    const CFG_TEST: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let (mut out, mut dropped, mut i) = (Vec::new(), HashSet::new(), 0);
    while i < toks.len() {
        if CFG_TEST.iter().enumerate().any(|(k, t)| text(&toks, i + k) != *t) {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        let mut j = i + CFG_TEST.len();
        while text(&toks, j) == "#" {
            j = close_of(&toks, j + 1, "[", "]") + 1; // further attributes of the same item
        }
        let k = (j..toks.len()).find(|&k| matches!(text(&toks, k), "{" | ";")).unwrap_or(toks.len());
        if text(&toks, k) == ";" {
            dropped.extend((j..k).find(|&m| text(&toks, m) == "mod").map(|m| text(&toks, m + 1).to_string()));
            i = k + 1;
        } else {
            i = close_of(&toks, k, "{", "}") + 1;
            i += usize::from(text(&toks, i) == ";");
        }
    }
    (out, dropped)
}

/// One path of a `use` tree: its segments, its alias (`"*"` for a glob) and its line.
type UsePath = (Vec<String>, Option<String>, usize);

/// Parses the use tree at `toks[i]` into `out`; returns the index after it.
fn parse_use_tree(toks: &[Token], mut i: usize, prefix: &[String], out: &mut Vec<UsePath>) -> usize {
    let mut segs = prefix.to_vec();
    while i < toks.len() {
        match text(toks, i) {
            "::" => i += 1,
            "{" => {
                i += 1;
                while i < toks.len() && text(toks, i) != "}" {
                    i = parse_use_tree(toks, i, &segs, out);
                    i += usize::from(text(toks, i) == ",");
                }
                return i + 1;
            }
            "*" => {
                out.push((segs, Some("*".to_string()), toks[i].1));
                return i + 1;
            }
            t if is_ident(t) && text(toks, i + 1) == "::" => {
                segs.push(t.to_string());
                i += 2;
            }
            t if is_ident(t) => {
                segs.push(t.to_string());
                let alias = (text(toks, i + 1) == "as").then(|| text(toks, i + 2).to_string());
                let end = if alias.is_some() { i + 3 } else { i + 1 };
                out.push((segs, alias, toks[end.min(toks.len()) - 1].1));
                return end;
            }
            _ => return i + 1,
        }
    }
    i
}

/// A module: a file, or an inline `mod x { }` inside one.
#[derive(Default)]
struct Module {
    path: Vec<String>,
    file: String,
    inline: bool,
    children: BTreeMap<String, usize>,
    defs: HashSet<String>,
    /// Names bound by `use`: name -> (path as written, module the `use` is in).
    binds: HashMap<String, (Vec<String>, usize)>,
    /// Paths named (as written), with their line and whether it is a bare name that a glob may provide.
    refs: Vec<(Vec<String>, usize, bool)>,
    /// The paths of its `use path::*` (as written).
    globs: Vec<Vec<String>>,
}

/// The module tree of one crate: its modules in one list, linked by index (the root is 0).
struct Crate {
    dir: PathBuf,
    mods: Vec<Module>,
}

impl Crate {
    fn load(dir: &Path, root_file: &str) -> Crate {
        let mut krate = Crate { dir: dir.to_path_buf(), mods: vec![Module { file: root_file.to_string(), ..Module::default() }] };
        krate.load_file(0);
        krate
    }

    fn add_child(&mut self, parent: usize, name: &str, file: String, inline: bool) -> usize {
        let path = [&self.mods[parent].path[..], &[name.to_string()]].concat();
        self.mods.push(Module { path, file, inline, ..Module::default() });
        let child = self.mods.len() - 1;
        self.mods[parent].children.insert(name.to_string(), child);
        child
    }

    /// Reads the file of module `top`: its items, `use`s, paths named and child modules (recursively).
    fn load_file(&mut self, top: usize) {
        let file = self.mods[top].file.clone();
        let src = fs::read_to_string(self.dir.join(&file)).unwrap_or_else(|e| panic!("cannot read {file}: {e}"));
        let (toks, dropped) = drop_cfg_test(tokenize(&src));
        let t = |i: usize| text(&toks, i);
        let (mut stack, mut depth, mut i) = (vec![(top, 0)], 0, 0); // stack: (module, brace depth of its items)
        while i < toks.len() {
            let (tok, line, (cur, mod_depth)) = (t(i), toks[i].1, stack[stack.len() - 1]);
            let after_path = i > 0 && matches!(t(i - 1), "::" | ".");
            let (name, next) = (t(i + 1), t(i + 2));
            match tok {
                "{" | "}" => {
                    depth += if tok == "{" { 1 } else { -1 };
                    i += 1;
                    if stack.len() > 1 && depth < mod_depth {
                        stack.pop(); // the end of an inline module
                    }
                }
                "mod" if !after_path && next == ";" && !dropped.contains(name) && !self.mods[cur].inline => {
                    if let Some(child) = child_file(&self.dir, &file, name) {
                        let c = self.add_child(cur, name, child, false);
                        self.load_file(c);
                    }
                    i += 3;
                }
                "mod" if !after_path && next == "{" => {
                    depth += 1;
                    stack.push((self.add_child(cur, name, file.clone(), true), depth));
                    i += 3;
                }
                "use" if !after_path => {
                    let mut trees = Vec::new();
                    i = parse_use_tree(&toks, i + 1, &[], &mut trees);
                    for (mut segs, alias, line) in trees {
                        let m = &mut self.mods[cur];
                        if alias.as_deref() == Some("*") {
                            m.globs.push(segs);
                            continue;
                        }
                        if segs.last().is_some_and(|s| s == "self") {
                            segs.pop(); // `use a::b::{self}` binds b
                        }
                        let Some(last) = segs.last().cloned() else { continue };
                        m.refs.push((segs.clone(), line, false));
                        if alias.as_deref() != Some("_") {
                            m.binds.insert(alias.unwrap_or(last), (segs, cur));
                        }
                    }
                }
                _ => {
                    let m = &mut self.mods[cur];
                    if depth == mod_depth && ITEM_KEYWORDS.contains(&tok) && !after_path && i + 2 < toks.len() {
                        let item = if tok == "const" && name == "fn" { next } else { name };
                        m.defs.extend(is_ident(item).then(|| item.to_string()));
                    }
                    if tok == "macro_rules" && i + 2 < toks.len() {
                        m.defs.insert(next.to_string());
                    }
                    i += 1;
                    if is_ident(tok) && !after_path {
                        let mut segs = vec![tok.to_string()]; // a path `a::b::c`, or a bare name
                        while t(i) == "::" && is_ident(t(i + 1)) {
                            segs.push(t(i + 1).to_string());
                            i += 2;
                        }
                        let bare = segs.len() == 1;
                        m.refs.push((segs, line, bare));
                    }
                }
            }
        }
    }

    /// The modules of the tree below `m`, `m` first (a `mod x;` declared twice keeps its last one).
    fn tree(&self, m: usize) -> Vec<usize> {
        std::iter::once(m).chain(self.mods[m].children.values().flat_map(|&c| self.tree(c))).collect()
    }

    fn module_at(&self, path: &[String]) -> Option<usize> {
        path.iter().try_fold(0, |m, s| self.mods[m].children.get(s).copied())
    }

    /// A path as written in module `ctx` -> its absolute path in the crate (None: outside the crate).
    fn absolute(&self, segs: &[String], ctx: usize, depth: usize) -> Option<Vec<String>> {
        let (head, m) = (segs.first()?, &self.mods[ctx]);
        match head.as_str() {
            _ if depth > 20 => None,
            "crate" => Some(segs[1..].to_vec()),
            "self" => Some([&m.path[..], &segs[1..]].concat()),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                Some([&m.path[..m.path.len().saturating_sub(ups)], &segs[ups..]].concat())
            }
            _ if m.children.contains_key(head) => Some([&m.path[..], segs].concat()),
            _ => match m.binds.get(head)? {
                (bound, bctx) if bound[0] == *head && *bctx == ctx => None, // `use other_crate::...`
                (bound, bctx) => Some([&self.absolute(bound, *bctx, depth + 1)?[..], &segs[1..]].concat()),
            },
        }
    }

    /// The absolute paths of the modules of this crate that module `m` glob-imports.
    fn globs(&self, m: usize) -> Vec<Vec<String>> {
        self.mods[m].globs.iter().filter_map(|g| self.absolute(g, m, 0)).filter(|a| self.module_at(a).is_some()).collect()
    }

    /// The names `use path::*` brings in: its items, its `use` bindings, and those of its own globs.
    fn glob_names(&self, path: &[String], seen: &mut HashSet<Vec<String>>) -> HashSet<String> {
        let Some(m) = self.module_at(path).filter(|_| seen.insert(path.to_vec())) else { return HashSet::new() };
        let mut names: HashSet<String> = self.mods[m].defs.iter().chain(self.mods[m].binds.keys()).cloned().collect();
        for g in self.globs(m) {
            names.extend(self.glob_names(&g, seen));
        }
        names
    }

    /// An absolute path -> (file defining it, item name; None for a module), through re-exports.
    fn resolve(&self, path: &[String], seen: &mut HashSet<Vec<String>>) -> Option<(String, Option<String>)> {
        if !seen.insert(path.to_vec()) {
            return None;
        }
        let (mut m, mut i) = (0, 0);
        while let Some(&c) = path.get(i).and_then(|s| self.mods[m].children.get(s)) {
            (m, i) = (c, i + 1);
        }
        let module = &self.mods[m];
        let Some(name) = path.get(i) else { return Some((module.file.clone(), None)) };
        if module.defs.contains(name) {
            return Some((module.file.clone(), Some(name.clone())));
        }
        if let Some((bound, ctx)) = module.binds.get(name) {
            return self.resolve(&[&self.absolute(bound, *ctx, 0)?[..], &path[i + 1..]].concat(), seen);
        }
        let mut via_globs = self.globs(m).into_iter().map(|g| self.resolve(&[&g[..], &path[i..]].concat(), seen));
        via_globs.find(|r| r.as_ref().is_some_and(|r| r.1.as_ref() == Some(name))).flatten()
    }

    /// Adds every import of one file by another to `imports`.
    fn add_imports(&self, imports: &mut Imports) {
        for m in self.tree(0) {
            let module = &self.mods[m];
            let mut via_glob: HashMap<String, Vec<String>> = HashMap::new();
            for g in self.globs(m) {
                for name in self.glob_names(&g, &mut HashSet::new()) {
                    via_glob.entry(name).or_insert_with(|| g.clone());
                }
            }
            for (segs, line, bare) in &module.refs {
                let local = |n: &String| module.defs.contains(n) || module.binds.contains_key(n) || module.children.contains_key(n);
                let path = match via_glob.get(&segs[0]) {
                    _ if !bare => self.absolute(segs, m, 0),
                    Some(g) if !local(&segs[0]) => Some([&g[..], &segs[..]].concat()),
                    _ => None,
                };
                let Some(path) = path else { continue };
                let Some((file, item)) = self.resolve(&path, &mut HashSet::new()) else { continue };
                if file == module.file || (*bare && item.is_none()) {
                    continue; // within the file, or a bare name that is a module
                }
                let item = item.unwrap_or_else(|| format!("module {}", path.join("::")));
                imports.entry((module.file.clone(), file)).or_default().insert((*line, item));
            }
        }
    }
}

/// The file of `mod name;` declared in `parent` (`name.rs` or `name/mod.rs` beside or below it).
fn child_file(dir: &Path, parent: &str, name: &str) -> Option<String> {
    let (folder, base_name) = parent.rsplit_once('/').unwrap_or(("", parent));
    let base = if matches!(base_name, "mod.rs" | "lib.rs" | "main.rs") { folder } else { parent.strip_suffix(".rs").unwrap_or(parent) };
    let candidates = [format!("{name}.rs"), format!("{name}/mod.rs")];
    candidates.into_iter().map(|c| if base.is_empty() { c } else { format!("{base}/{c}") }).find(|c| dir.join(c).exists())
}

/// The import graph of some crates: their files, the file of each one's parent module, the imports.
#[derive(Default)]
struct Graph {
    files: BTreeSet<String>,
    parent: HashMap<String, String>,
    imports: Imports,
}

impl Graph {
    fn of(dir: &Path, crate_roots: &[&str]) -> Graph {
        let mut graph = Graph::default();
        for root in crate_roots {
            let krate = Crate::load(dir, root);
            for module in krate.tree(0).into_iter().map(|m| &krate.mods[m]).filter(|m| !m.inline) {
                graph.files.insert(module.file.clone());
                for child in module.children.values().map(|&c| &krate.mods[c]).filter(|c| !c.inline) {
                    graph.parent.insert(child.file.clone(), module.file.clone());
                }
            }
            krate.add_imports(&mut graph.imports);
        }
        graph
    }

    /// Whether `file` is module `folder` or lies below it.
    fn is_within(&self, file: &str, folder: &str) -> bool {
        file == folder || std::iter::successors(self.parent.get(file), |p| self.parent.get(p.as_str())).any(|p| p == folder)
    }
}

/// The files that `from` leads to along `adj`, `from` included.
fn reach<'a>(from: &'a str, adj: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> BTreeSet<&'a str> {
    let (mut seen, mut todo) = (BTreeSet::from([from]), vec![from]);
    while let Some(f) = todo.pop() {
        todo.extend(adj.get(f).into_iter().flatten().filter(|g| seen.insert(g)));
    }
    seen
}

/// The imports `from` makes of `to`, one line each: where it is and what it names.
fn describe(from: &str, to: &str, items: &BTreeSet<(usize, String)>) -> String {
    items.iter().map(|(line, item)| format!("    {from}:{line} uses {item} from {to}\n")).collect()
}

/// Each import circle found, with its files and the imports that form it (empty: none).
///
/// Reported: (1) each set of files that reach each other through imports, the imports a child makes
/// of its own ancestors left out; (2) each such import of an ancestor that closes a circle through
/// files outside the ancestor's folder.
fn circles(graph: &Graph) -> Vec<String> {
    let (mut down, mut back) = (BTreeMap::new(), BTreeMap::new());
    for (a, b) in graph.imports.keys().filter(|(a, b)| !graph.is_within(a, b)) {
        down.entry(a.as_str()).or_insert_with(BTreeSet::new).insert(b.as_str());
        back.entry(b.as_str()).or_insert_with(BTreeSet::new).insert(a.as_str());
    }
    let (mut problems, mut seen) = (Vec::new(), BTreeSet::new());
    for f in &graph.files {
        let circle: Vec<&str> = reach(f, &down).intersection(&reach(f, &back)).copied().collect();
        if circle.len() > 1 && seen.insert(circle.clone()) {
            let inside = |a: &str, b: &str| circle.contains(&a) && circle.contains(&b) && !graph.is_within(a, b);
            let imports = graph.imports.iter().filter(|((a, b), _)| inside(a, b)).map(|((a, b), items)| describe(a, b, items));
            problems.push(format!("circle of {} files: {}\n{}", circle.len(), circle.join(" "), imports.collect::<String>()));
        }
    }
    for ((child, ancestor), items) in graph.imports.iter().filter(|((a, b), _)| graph.is_within(a, b)) {
        let mut through = reach(ancestor, &down).intersection(&reach(child, &back)).copied().collect::<Vec<_>>();
        through.retain(|f| !graph.is_within(f, ancestor));
        if !through.is_empty() {
            let through = through.join(" ");
            let imports = describe(child, ancestor, items);
            problems.push(format!("{child} imports its ancestor {ancestor}, which leads back to it through {through}:\n{imports}"));
        }
    }
    problems
}

#[test]
fn the_modules_of_both_crates_import_each_other_in_one_direction_only() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = std::env::var_os("ESOFLOW_IMPORTS_ROOT").map_or(workspace, PathBuf::from);
    let graph = Graph::of(&root, &["sim-core/src/lib.rs", "app/src/main.rs"]);
    if std::env::var_os("ESOFLOW_IMPORTS_EDGES").is_some() {
        for ((a, b), items) in &graph.imports {
            let items: Vec<String> = items.iter().map(|(line, item)| format!("{item}@{line}")).collect();
            println!("{a} -> {b}: {}", items.join(", "));
        }
    }
    // Hundreds of imports are expected; a handful would mean the scan went wrong, not that all is well.
    assert!(graph.imports.len() > 100, "only {} imports found under {}", graph.imports.len(), root.display());
    let problems = circles(&graph);
    let n = problems.len();
    let advice = "move one of the imports listed (or the item it names) so that each circle opens";
    assert!(problems.is_empty(), "{n} import circle(s) between modules; {advice}:\n\n{}", problems.join("\n"));
}

/// Writes `files` (path, text) to a fresh folder under the system temp dir and checks that crate.
fn circles_in(name: &str, files: &[(&str, &str)]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!("esoflow-imports-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir); // left over from an earlier run, if any
    for (path, text) in files {
        fs::create_dir_all(dir.join(path).parent().expect("a folder")).expect("create the folder");
        fs::write(dir.join(path), text).expect("write the file");
    }
    let problems = circles(&Graph::of(&dir, &["src/lib.rs"]));
    fs::remove_dir_all(&dir).expect("remove the temp crate");
    problems
}

#[test]
fn the_check_finds_circles_in_a_small_crate_and_passes_one_without() {
    let (lib, a) = (("src/lib.rs", "mod a;\nmod b;\n"), ("src/a.rs", "use crate::b::B;\npub struct A;\n"));
    let found = circles_in("circle", &[lib, a, ("src/b.rs", "pub struct B;\nfn f(_: crate::a::A) {}\n")]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("src/a.rs:1 uses B from src/b.rs\n") && found[0].contains("src/b.rs:2 uses A from src/a.rs\n"), "{found:?}");

    // b.rs names A only in a comment, a string and test code: no circle.
    let b = "// crate::a::A\npub struct B;\nconst S: &str = \"crate::a::A\";\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n";
    let found = circles_in("none", &[lib, a, ("src/b.rs", b)]);
    assert!(found.is_empty(), "{found:?}");

    // p/c.rs may use its parent p, but not when p reaches c again through q, outside p's folder.
    let (lib, q) = (("src/lib.rs", "mod p;\nmod q;\n"), ("src/q.rs", "pub struct Q(crate::p::c::C);\n"));
    let (p, c) = (("src/p/mod.rs", "pub mod c;\npub struct P(crate::q::Q);\n"), ("src/p/c.rs", "pub struct C;\nfn f(_: super::P) {}\n"));
    let found = circles_in("ancestor", &[lib, p, q, c]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("src/p/c.rs:2 uses P from src/p/mod.rs") && found[0].contains("through src/q.rs"), "{found:?}");
}
