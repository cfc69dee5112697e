#!/usr/bin/env python3
"""Find import circles among the modules of each crate in the workspace.

Rule: for every module P, its direct child modules are the nodes of a graph;
child A has an edge to child B when any module inside A's subtree names
anything inside B's subtree, through `crate::...`, `super::...` or `self::...`
paths (in `use` trees, grouped forms included, and inline paths). A path is
resolved to the deepest existing module it names. A strongly connected
component of two or more siblings is a circle. A child using its parent's
items, or a parent using its children, is never a circle.

The module tree starts at src/lib.rs and src/main.rs and follows `mod x;`
(x.rs, x/mod.rs, children of x.rs in x/) and inline `mod x { ... }`.
Comments (so intra-doc links too), string literals and test-only code (any item under
`#[cfg(test)]` / `#[cfg(all(test, ...))]`, e.g. `mod tests { ... }`) are
ignored. Only one bin root per crate (main.rs); src/bin/*.rs and tests/ are not read.

Usage: .ci/module-cycles.py [CRATE_DIR ...]   (default: every crate)
Exit status: 1 when a circle exists, 0 otherwise.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {"target", "node_modules", os.path.join("tests", "fuzz")}
LEX = re.compile(r'//[^\n]*|/\*.*?\*/|(?<!\w)b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|'
                 r"b?'(?:\\(?:u\{[0-9a-fA-F_]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", re.S)
CFG = re.compile(r"#\s*(!?)\s*\[\s*cfg\s*\(")
TEST_CFG = re.compile(r"^(test|all\((.*,)?test(,.*)?\))$")
ITEM = re.compile(r"\s*(pub\s*(\([^)]*\))?\s*)?((async|unsafe|const|extern|default)\s+)*"
                  r"(fn|mod|impl|struct|enum|trait|use|const|static|type|union|macro_rules)\b")
MOD = re.compile(r"\bmod\s+(?:r#)?(\w+)\s*([;{])")
USE = re.compile(r"\buse\s+([^;]*);")
PATH = re.compile(r"(?<![\w$])(crate|super|self)((?:\s*::\s*\w+)+)")
OPEN, CLOSE = "([{", ")]}"


def blank(s):
    """Spaces for everything but newlines, so offsets and line numbers hold."""
    return re.sub(r"[^\n]", " ", s)


def match_close(t, i):
    """Index just past the bracket that closes the one at t[i]."""
    depth = 0
    for j in range(i, len(t)):
        if t[j] in OPEN: depth += 1
        elif t[j] in CLOSE:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(t)


def drop_test_items(t):
    """Blank every item (or field) that is compiled only under cfg(test)."""
    pos = 0
    while m := CFG.search(t, pos):
        attr_end = match_close(t, t.index("[", m.start()))
        expr = re.sub(r"\s", "", t[m.end():match_close(t, m.end() - 1) - 1])
        if not TEST_CFG.match(expr):
            pos = m.end()
            continue
        if m.group(1):  # `#![cfg(test)]`: the whole file is test code
            return blank(t)
        j = attr_end
        while (a := re.compile(r"\s*#\s*\[").match(t, j)):  # further attributes
            j = match_close(t, a.end() - 1)
        is_item, depth = bool(ITEM.match(t, j)), 0
        while j < len(t):
            c = t[j]
            if c == "{" and depth == 0 and is_item:
                j = match_close(t, j)
                break
            if c in OPEN: depth += 1
            elif c in CLOSE:
                if depth == 0: break
                depth -= 1
            elif depth == 0 and (c == ";" or (c == "," and not is_item)):
                j += 1
                break
            j += 1
        t = t[:m.start()] + blank(t[m.start():j]) + t[j:]
        pos = j
    return t


def use_paths(body, base):
    """Expand a `use` tree into (segments, offset of the last segment) per leaf."""
    toks = [(m.group(), base + m.start()) for m in re.finditer(r"\w+|[{},*]", body)]
    out = []
    def tree(i, path):  # returns the index just past this (sub)tree
        while i < len(toks) and toks[i][0] not in ("{", "}", ",", "*", "as"):
            path, i = path + [toks[i]], i + 1
        if i < len(toks) and toks[i][0] == "{":
            i += 1
            while i < len(toks) and toks[i][0] != "}":
                i = tree(i, path)
                i += i < len(toks) and toks[i][0] == ","
            return i + 1
        i += {"as": 2, "*": 1}.get(toks[i][0], 0) if i < len(toks) else 0
        if len(path) > 1 and path[-1][0] == "self": path = path[:-1]  # `a::{self}`
        if path: out.append(([s for s, _ in path], path[-1][1]))
        return i
    i = 0
    while i < len(toks):
        i = max(tree(i, []), i + 1)
    return out


def load_crate(root_file):
    """Module tree {path tuple: file} and raw refs (module, segments, file, line)."""
    modules, refs = {(): root_file}, []
    todo = [((), root_file, True)]
    while todo:
        mod, fname, owns_dir = todo.pop()
        with open(fname, encoding="utf-8") as f:
            t = drop_test_items(LEX.sub(lambda m: blank(m.group()), f.read()))
        mdir = os.path.dirname(fname) if owns_dir else fname[:-3]
        spans = []  # (start, end, inline chain)
        def chain_at(p):
            inside = [s for s in spans if s[0] <= p < s[1]]
            return max(inside)[2] if inside else ()
        for m in MOD.finditer(t):
            chain = chain_at(m.start()) + (m.group(1),)
            if m.group(2) == "{":
                spans.append((m.end() - 1, match_close(t, m.end() - 1), chain))
                modules[mod + chain] = fname
                continue
            d = os.path.join(mdir, *chain[:-1])
            for cand, owns in ((os.path.join(d, chain[-1] + ".rs"), False),
                               (os.path.join(d, chain[-1], "mod.rs"), True)):
                if os.path.isfile(cand):
                    modules[mod + chain] = cand
                    todo.append((mod + chain, cand, owns))
                    break
            else:
                print(f"warning: {fname}: no file for `mod {m.group(1)};`", file=sys.stderr)
        line = lambda p: t.count("\n", 0, p) + 1
        found = [(segs, off) for u in USE.finditer(t) for segs, off in use_paths(u.group(1), u.start(1))]
        found += [([m.group(1)] + re.findall(r"\w+", m.group(2)), m.start()) for m in PATH.finditer(t)]
        for segs, off in found:
            if segs[0] in ("crate", "super", "self"):
                refs.append((mod + chain_at(off), segs, fname, line(off)))
    return modules, refs


def resolve(modules, cur, segs):
    """The deepest existing module that a crate/super/self path from `cur` names."""
    base = () if segs[0] == "crate" else cur
    for s in segs[segs[0] == "crate":]:
        if s == "super":
            if not base: return None
            base = base[:-1]
        elif s != "self":
            if base + (s,) not in modules: break
            base += (s,)
    return base


def tarjan(nodes, succ):
    """Strongly connected components with more than one node."""
    index, low, stack, on, sccs = {}, {}, [], set(), []
    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v); on.add(v)
        for w in succ.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = stack[stack.index(v):]
            del stack[stack.index(v):]
            on.difference_update(scc)
            sccs.append(sorted(scc))
    for v in nodes:
        if v not in index: visit(v)
    return [s for s in sccs if len(s) > 1]


def check(label, crate_dir, root_file):
    """Print the crate's summary line and circles; True when it has a circle."""
    modules, refs = load_crate(root_file)
    edges = {}  # parent -> {(a, b): (file, line, path text)}
    for cur, segs, fname, ln in sorted(refs, key=lambda r: (r[2], r[3])):
        dst = resolve(modules, cur, segs)
        if dst is None: continue
        k = len(os.path.commonprefix([cur, dst]))
        if k == len(cur) or k == len(dst): continue  # ancestor or descendant
        where = (os.path.relpath(fname, crate_dir), ln, "::".join(segs))
        edges.setdefault(cur[:k], {}).setdefault((cur[k], dst[k]), where)
    circles = []
    for parent in sorted(edges):
        pe, succ = edges[parent], {}
        for a, b in pe: succ.setdefault(a, []).append(b)
        for scc in tarjan(sorted({x for e in pe for x in e}), succ):
            circles.append((parent, scc, sorted((e, w) for e, w in pe.items() if set(e) <= set(scc))))
    found = f"{len(circles)} circle(s)" if circles else "no circle"
    print(f"crate {label}: {len(modules)} modules, {found}")
    for parent, scc, es in circles:
        print(f"  circle under {'::'.join(('crate',) + parent)}: {', '.join(scc)}")
        for (a, b), (f, ln, text) in es:
            print(f"    {a} -> {b}: {f}:{ln} ({text})")
    return bool(circles)


def crate_dirs(args):
    """The given crate directories, or every one with Cargo.toml and src/."""
    if args:
        return [os.path.abspath(a[:-len("Cargo.toml")] if a.endswith("Cargo.toml") else a) for a in args]
    found = []
    for d, subdirs, files in os.walk(ROOT):
        rel = os.path.relpath(d, ROOT)
        subdirs[:] = sorted(s for s in subdirs if not s.startswith(".")
                            and s not in SKIP_DIRS and os.path.join(rel, s) not in SKIP_DIRS)
        if "Cargo.toml" in files and os.path.isdir(os.path.join(d, "src")):
            found.append(d)
    return found


def main(args):
    bad = False
    for d in crate_dirs(args):
        name = os.path.relpath(d, ROOT)
        roots = [r for r in ("lib.rs", "main.rs") if os.path.isfile(os.path.join(d, "src", r))]
        if not roots:
            print(f"error: {name}: no src/lib.rs or src/main.rs", file=sys.stderr)
            return 2
        for r in roots:
            label = name if len(roots) == 1 else f"{name} ({r})"
            bad |= check(label, d, os.path.join(d, "src", r))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
