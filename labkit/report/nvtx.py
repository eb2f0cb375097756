"""Read the NVTX ranges and marks of an export (``NVTX_EVENTS``) into one frame, nested per thread."""
from __future__ import annotations

import numpy as np
import pandas as pd

from labkit.report.reader import _TID_MASK, NVTX_COLUMNS, _Db, _empty, _lookup, parse_ints, pid_of

__all__ = ["read_nvtx", "nvtx_frame_empty", "range_durations"]

# Event types of NVTX_EVENTS (stable across 2022.4 .. 2025.3; re-read from
# ENUM_NSYS_EVENT_TYPE when the export carries it).
_NVTX_TYPES = {
    "NvtxMark": 34,
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtMark": 65,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
    "NvtxDomainCreate": 75,
    "NvtxCategory": 33,
    "NvtxtCategory": 64,
}


COLUMNS_FROM = 50_000  # NVTX_EVENTS rows above which range_durations reads in one pass (see _one_scan)


def _event_types(db: _Db) -> tuple[dict, list, list, list]:
    """NVTX event type ids (from ENUM_NSYS_EVENT_TYPE when present): all, push/pop, start/end, marks."""
    types = dict(_NVTX_TYPES)
    if db.has("ENUM_NSYS_EVENT_TYPE", "id", "name"):
        for i, n in db.scalar_rows("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE WHERE name LIKE 'Nvtx%'"):
            if n in types:
                types[n] = int(i)
    return (types, [types["NvtxPushPopRange"], types["NvtxtPushPopRange"]],
            [types["NvtxStartEndRange"], types["NvtxtStartEndRange"]], [types["NvtxMark"], types["NvtxtMark"]])


def _domain_names(db: _Db, types: dict, rows: list | None = None) -> dict:
    """(domainId, pid) -> domain name, from the NvtxDomainCreate rows (as nsys stats joins them);
    ``rows``: those of :func:`_domain_sql`'s query where already read."""
    if not db.has("NVTX_EVENTS", "domainId", "globalTid", "text"):
        return {}
    rows = db.scalar_rows(_domain_sql(types)) if rows is None else rows
    return {(int(d), pid_of(int(g))): s for d, g, s in rows if d is not None and g is not None}


def _domain_sql(types: dict) -> str:
    return (f"SELECT domainId, globalTid, text FROM NVTX_EVENTS "
            f"WHERE eventType = {types['NvtxDomainCreate']} AND text IS NOT NULL")


def _category_names(db: _Db, types: dict) -> dict:
    """(domainId, category, pid) -> category name, from the NvtxCategory rows (nvtxNameCategory)."""
    if not db.has("NVTX_EVENTS", "category", "domainId", "globalTid"):
        return {}
    cols = db.columns("NVTX_EVENTS")
    text = "coalesce(text, (SELECT value FROM StringIds WHERE id = textId))" if "textId" in cols else "text"
    rows = db.scalar_rows(f"SELECT coalesce(domainId, 0), category, globalTid, {text} FROM NVTX_EVENTS "
                          f"WHERE eventType IN ({types['NvtxCategory']}, {types['NvtxtCategory']})")
    return {(int(d), int(c), pid_of(int(g))): s for d, c, g, s in rows
            if c is not None and g is not None and s is not None}


def range_durations(db: _Db, strings: np.ndarray) -> pd.DataFrame:
    """Durations of every NVTX range (push/pop and start/end) for summaries that need nothing else,
    read without nesting or payloads: name, domain, style, duration_ns (unended ranges closed at the
    last timestamp of NVTX_EVENTS, as nsys stats does)."""
    t = "NVTX_EVENTS"
    if not db.has(t, "start", "end", "eventType"):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in ("name", "domain", "style")}
                            ).assign(duration_ns=pd.Series(dtype="int64"))
    types, pp, se, _ = _event_types(db)
    cols = set(db.columns(t))
    if db.rows_at_most(t) > COLUMNS_FROM:
        out = _one_scan(db, strings, t, types, pp, se, cols)
        if out is not None:
            return out
    dmap = _domain_names(db, types)
    maxts = int(db.scalar_rows(f"SELECT coalesce(max(max(start), coalesce(max(end), 0)), 0) FROM [{t}]")[0][0])
    dur = f"(coalesce([end], {maxts}) - start)"
    where = f"FROM [{t}] WHERE eventType IN ({','.join(map(str, pp + se))})"
    parts = []
    if not dmap and "textId" in cols:
        # the default domain only: (textId, style, duration) packed in one integer per range, one
        # column read (about 4x cheaper than SQLite's GROUP BY sort); inline texts are grouped below
        joined, n, lo, hi, kmax = db.scalar_rows(
            f"SELECT group_concat((textId << 41) | ((eventType IN ({','.join(map(str, se))})) << 40) | {dur}), "
            f"count(*), min({dur}), max({dur}), max(textId) {where} AND textId IS NOT NULL")[0]
        try:
            packed = parse_ints(joined) if joined else np.empty(0, dtype=np.int64)
        except ValueError:  # a non-integer somewhere: the grouped query below says where
            packed = None
        if packed is not None and (n == 0 or (lo >= 0 and hi < 2**40 and kmax < 2**21 and len(packed) == n)):
            name = _lookup(strings, packed >> 41)
            if not (name == None).any():  # noqa: E711 - else the grouped query below resolves them
                style = np.where((packed >> 40) & 1, "StartEnd", "PushPop").astype(object)
                parts.append((name, np.full(n, "", dtype=object), style, packed & (2**40 - 1)))
                where += " AND textId IS NULL"
    text_id = "coalesce(textId, -1)" if "textId" in cols else "-1"
    text = "text" if "text" in cols else "NULL"
    dom = "coalesce(domainId, -1)" if "domainId" in cols else "-1"
    pid = "((coalesce(globalTid, 0) >> 24) & 16777215)" if "globalTid" in cols else "0"
    rows = db.scalar_rows(f"SELECT eventType, {text_id}, {text}, {dom}, {pid}, group_concat({dur}), count(*) "
                          f"{where} GROUP BY 1, 2, 3, 4, 5", t)
    for typ, tid, txt, did, p, joined, n in rows:
        try:
            d = parse_ints(joined) if joined else np.empty(0, dtype=np.int64)
            tid, did, p = int(tid), int(did), int(p)
        except (TypeError, ValueError) as exc:
            raise db.fail(t, exc) from None
        if len(d) != n:
            raise db.fail(t, f"{n - len(d)} ranges without a start time")
        name = strings[tid] if 0 <= tid < len(strings) and strings[tid] is not None else txt
        parts.append((np.full(len(d), name or "", dtype=object), np.full(len(d), dmap.get((did, p), ""), dtype=object),
                      np.full(len(d), "PushPop" if typ in pp else "StartEnd", dtype=object), d))
    cat = (lambda i, dt: np.concatenate([x[i] for x in parts]) if parts else np.empty(0, dtype=dt))
    return pd.DataFrame({"name": cat(0, object), "domain": cat(1, object), "style": cat(2, object),
                         "duration_ns": cat(3, np.int64)})


def _one_scan(db: _Db, strings: np.ndarray, t: str, types: dict, pp: list, se: list, cols: set):
    """range_durations of a large export in one pass over NVTX_EVENTS: SQLite joins (style, duration)
    packed in one integer and the name (the inline text, or char(30) and the StringIds id) into one
    string each (and domain and process where domains exist); numpy parses them, pandas factorizes
    the names and only the distinct ones are looked up. None where that does not fit (an unended
    range, a text holding the separator): then the grouped queries are used."""
    se_sql = ",".join(map(str, se))
    p = f"((eventType IN ({se_sql})) << 40) | ([end] - start)"  # NULL when unended: a count short
    did = "coalesce(domainId, -1)" if "domainId" in cols else "-1"
    pid = "((coalesce(globalTid, 0) >> 24) & 16777215)" if "globalTid" in cols else "0"
    dp = f"(({did} + 1) << 24) | {pid}"
    names = [x for x in ("text", "char(30) || textId") if x.split()[-1] in cols] + ["''"]
    where = f"FROM [{t}] NOT INDEXED WHERE eventType IN ({','.join(map(str, pp + se))})"
    # Three queries read at once (_Db.at_once): the durations, the names, the domains. No ORDER BY:
    # NOT INDEXED makes each of the first two a scan of the table in rowid order, so their
    # group_concats list the rows in one order (and their counts must agree). Where domains exist,
    # the (domain, process) of each range is read too, with the durations to keep the order, and
    # only where there are several (its column costs a third of the pass)
    dsql = [_domain_sql(types)] if db.has(t, "domainId", "globalTid", "text") else []
    (ints,), (text,), *drows = db.at_once([f"SELECT count(*), group_concat({p}) {where}",
                                           f"SELECT count(*), group_concat(coalesce({', '.join(names)}), char(31)) "
                                           f"{where}"] + dsql, t)
    dmap = _domain_names(db, types, drows[0] if drows else [])
    n = int(ints[0])
    if n != int(text[0]):
        return None
    try:
        c = {"p": parse_ints(ints[1] or "")}
        lo, hi = db.scalar_rows(f"SELECT min({dp}), max({dp}) {where}", t)[0] if dmap and n else (0, 0)
        if lo != hi:  # several: their column
            again = db.scalar_rows(f"SELECT group_concat({p}), group_concat({dp}) {where}", t)[0]
            if not np.array_equal(parse_ints(again[0] or ""), c["p"]):
                return None
            c["dp"] = parse_ints(again[1] or "")
        else:
            c["dp"] = np.full(n, int(lo or 0), dtype=np.int64)
    except (ValueError, TypeError):
        return None
    texts = (text[1] or "").split("\x1f") if n else []
    if len(texts) != n or any(len(v) != n for v in c.values()):
        return None
    packed = c["p"]
    if n and (packed.min() < 0 or (packed >> 41).any()):
        return None
    codes, uniq = pd.factorize(pd.Index(texts, dtype=object))
    cats = np.array([_resolve(u, strings) for u in uniq], dtype=object)
    name = pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object)) \
        if len(set(cats)) == len(cats) else cats[codes]
    domain = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=pd.Index([""], dtype=object))
    if dmap:  # one lookup per distinct (domain id, process), not per range
        uniq_dp, inv = np.unique(c["dp"], return_inverse=True)
        names_dp = [dmap.get((int(v >> 24) - 1, int(v & _TID_MASK)), "") for v in uniq_dp]
        dcodes, dcats = pd.factorize(pd.Index(names_dp, dtype=object))
        domain = pd.Categorical.from_codes(dcodes[inv], categories=dcats)
    style = pd.Categorical.from_codes((packed >> 40).astype(np.int8), categories=["PushPop", "StartEnd"])
    return pd.DataFrame({"name": name, "domain": domain, "style": style, "duration_ns": packed & (2**40 - 1)})


def _resolve(value: str, strings: np.ndarray) -> str:
    """An inline text as it is, or "\\x1e<id>" looked up in StringIds ('' where absent)."""
    if not value.startswith("\x1e"):
        return value
    i = int(value[1:])
    return (strings[i] if 0 <= i < len(strings) else None) or ""


def read_nvtx(db: _Db, strings: np.ndarray, thread_names: dict, notes: list) -> pd.DataFrame:
    t = "NVTX_EVENTS"
    if not db.has(t, "start", "eventType"):
        notes.append("no NVTX_EVENTS table: the run had no NVTX ranges (trace with -t nvtx and annotate "
                     "the program, e.g. with labkit.annotate)")
        return nvtx_frame_empty()
    types, pp, se, mk = _event_types(db)
    wanted = pp + se + mk
    cols = db.columns(t)
    payload_int = [c for c in ("int64Value", "uint64Value", "int32Value", "uint32Value") if c in cols]
    exprs = {"rowid": "rowid", "start": "start", "end": "end", "type": "eventType", "gtid": "globalTid",
             "end_gtid": "endGlobalTid", "text_id": "textId", "domain_id": "domainId", "color": "color",
             "category": "category"}
    for i, c in enumerate(payload_int):
        exprs[f"p{i}"] = c
    nn = db.notnull(t)
    sql_of = {name: ("rowid" if col == "rowid" else (f"[{col}]" if col in nn else f"coalesce([{col}], -1)"))
              for name, col in exprs.items() if col == "rowid" or col in cols}
    # payload NULL must stay distinguishable from -1: a null flag per payload column
    for i, col in enumerate(payload_int):
        sql_of[f"null{i}"] = f"([{col}] IS NULL)"
    where = f"AND eventType IN ({','.join(map(str, wanted))})"
    n = int(db.scalar_rows(f"SELECT count(*) FROM [{t}] WHERE 1 {where}")[0][0])
    if n == 0:
        notes.append("NVTX_EVENTS has no ranges or marks (only domain events?): with nsys 2022.4 use "
                     "nvtx==0.2.11, newer nvtx packages are not recorded")
        return nvtx_frame_empty()
    c = {name: db._column(t, expr, n, where) for name, expr in sql_of.items()}
    for name in exprs:
        c.setdefault(name, np.full(n, -1, dtype=np.int64))
    nulls = np.stack([c[f"null{i}"] for i in range(len(payload_int))], axis=1) if payload_int \
        else np.zeros((n, 0), dtype=np.int64)

    # names: textId -> StringIds, else the inline text column
    name = _lookup(strings, c["text_id"])
    if "text" in cols and (name == None).any():  # noqa: E711 - elementwise
        txt = dict(db.scalar_rows(f"SELECT rowid, text FROM [{t}] WHERE text IS NOT NULL"))
        missing = np.flatnonzero(name == None)  # noqa: E711
        name[missing] = [txt.get(int(r)) for r in c["rowid"][missing]]
    name[name == None] = ""  # noqa: E711

    # domains: NvtxDomainCreate rows name them, per process (as nsys stats joins them)
    domain = np.full(n, "", dtype=object)
    dmap = _domain_names(db, types)
    if dmap:
        pid = pid_of(c["gtid"])
        keys = pd.MultiIndex.from_arrays([c["domain_id"], pid])
        ser = pd.Series(list(dmap.values()), index=pd.MultiIndex.from_tuples(list(dmap.keys())), dtype=object)
        domain = np.array(ser.reindex(keys).to_numpy(dtype=object), dtype=object)  # a writable copy (pandas 3: read-only view)
        domain[pd.isna(domain)] = ""

    # categories: NvtxCategory rows name them per (domain, category, process); unnamed ones stay ""
    cat_name = np.full(n, "", dtype=object)
    cmap = _category_names(db, types)
    if cmap:
        pid = pid_of(c["gtid"])
        dom_id = np.where(c["domain_id"] < 0, 0, c["domain_id"])
        cat_name = np.array([cmap.get((int(d), int(k), int(p)), "") for d, k, p in zip(dom_id, c["category"], pid)],
                            dtype=object)

    typ = c["type"]
    kind = np.where(np.isin(typ, pp), "push_pop", np.where(np.isin(typ, se), "start_end", "mark")).astype(object)
    start = c["start"]
    end = c["end"].copy()
    is_mark = kind == "mark"
    ended = (end >= 0) | is_mark
    # nsys stats closes an unended range at the last timestamp of NVTX_EVENTS
    maxts = db.scalar_rows(f"SELECT max(max(start), coalesce(max(end), 0)) FROM [{t}]")[0][0]
    end[is_mark] = start[is_mark]
    end[~ended] = int(maxts)

    # payload: first non-NULL integer payload column, else a floating one
    payload = np.full(n, np.nan)
    for i in range(len(payload_int) - 1, -1, -1):
        ok = nulls[:, i] == 0
        payload[ok] = c[f"p{i}"][ok]
    fl = [x for x in ("doubleValue", "floatValue") if x in cols]
    float_payload = False
    if fl:
        frows = db.scalar_rows(f"SELECT rowid, coalesce({', '.join(fl)}) FROM [{t}] "
                               f"WHERE " + " OR ".join(f"{x} IS NOT NULL" for x in fl))
        if frows:
            pos = pd.Index(c["rowid"]).get_indexer([r for r, _ in frows])
            keep = pos >= 0
            payload[pos[keep]] = np.array([v for _, v in frows], dtype=float)[keep]
            float_payload = True
    payload_s = pd.Series(payload)
    if not float_payload:
        payload_s = payload_s.astype("Int64")

    gtid = c["gtid"]
    color = np.full(n, None, dtype=object)
    has_color = c["color"] >= 0
    if has_color.any():
        uc, inv = np.unique(c["color"][has_color], return_inverse=True)
        color[has_color] = np.array([f"#{int(v) & 0xFFFFFF:06x}" for v in uc], dtype=object)[inv]
    tname = pd.Series(gtid).map(thread_names).to_numpy(dtype=object)
    tname[pd.isna(tname)] = None

    df = pd.DataFrame({
        "name": name, "domain": domain, "start_ns": start, "end_ns": end, "duration_ns": end - start,
        "tid": gtid & _TID_MASK, "pid": pid_of(gtid), "global_tid": gtid,
        "thread_name": tname, "depth": np.zeros(n, dtype=np.int64), "parent": np.full(n, -1, dtype=np.int64),
        "kind": kind, "payload": payload_s, "color": color, "category": c["category"],
        "category_name": cat_name, "ended": ended,
        # ranges ending on another thread are left out of GPU projection, as nsys does
        "end_global_tid": c["end_gtid"],
    })
    df = df.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable", ignore_index=True)
    _nest(df)
    return df


def nvtx_frame_empty() -> pd.DataFrame:
    df = _empty(NVTX_COLUMNS + ["end_global_tid"])
    df["payload"] = df["payload"].astype("Int64")
    df["ended"] = df["ended"].astype(bool)
    return df


def _nest(df: pd.DataFrame) -> None:
    """Fill ``depth`` and ``parent`` in place: push/pop ranges nested per thread; a mark's
    parent is the innermost push/pop range open on its thread. Vectorized per thread."""
    kind = df["kind"].to_numpy()
    gtid = df["global_tid"].to_numpy()
    start = df["start_ns"].to_numpy()
    end = df["end_ns"].to_numpy()
    depth = np.zeros(len(df), dtype=np.int64)
    parent = np.full(len(df), -1, dtype=np.int64)
    is_pp = kind == "push_pop"
    is_mark = kind == "mark"
    for g in np.unique(gtid[is_pp | is_mark]):
        on = gtid == g
        rows = np.flatnonzero(on & is_pp)  # already sorted by (start, -end)
        s, e = start[rows], end[rows]
        if len(rows):
            # depth = ranges opened before me (in start order) minus those closed by my start
            closed = np.searchsorted(np.sort(e), s, side="right") - (e <= s)
            d = np.arange(len(rows)) - closed
            d = np.maximum(d, 0)
            par = np.full(len(rows), -1, dtype=np.int64)
            for lvl in range(1, int(d.max()) + 1 if len(d) else 1):
                cand = np.flatnonzero(d == lvl - 1)
                me = np.flatnonzero(d == lvl)
                j = np.searchsorted(cand, me) - 1
                ok = j >= 0
                p = np.where(ok, cand[np.maximum(j, 0)], -1)
                ok &= (s[np.maximum(p, 0)] <= s[me]) & (e[np.maximum(p, 0)] >= e[me])
                par[me[ok]] = p[ok]
            depth[rows] = d
            parent[rows] = np.where(par >= 0, rows[np.maximum(par, 0)], -1)
        marks = np.flatnonzero(on & is_mark)
        if len(marks) and len(rows):
            # innermost open range: walk up from the last range started at or before the mark
            t = start[marks]
            cand = np.searchsorted(s, t, side="right") - 1
            found = np.full(len(marks), -1, dtype=np.int64)
            pending = cand >= 0
            local_par = np.full(len(rows), -1, dtype=np.int64)
            # map parent rows back to local positions
            row_to_local = np.full(len(df), -1, dtype=np.int64)
            row_to_local[rows] = np.arange(len(rows))
            lp = parent[rows]
            local_par[lp >= 0] = row_to_local[lp[lp >= 0]]
            cur = cand.copy()
            while pending.any():
                c = cur[pending]
                inside = e[c] >= t[pending]
                idx = np.flatnonzero(pending)
                found[idx[inside]] = c[inside]
                up = local_par[c[~inside]]
                cur[idx[~inside]] = up
                pending[idx[inside]] = False
                pending[idx[~inside][up < 0]] = False
            ok = found >= 0
            parent[marks[ok]] = rows[found[ok]]
            depth[marks[ok]] = depth[rows[found[ok]]] + 1
    df["depth"] = depth
    df["parent"] = parent


