"""From the results dict (what goes into bench/results/<name>.json) to Markdown.

``goals(results)`` checks the issue's goals table against the measured figures;
``render(results)`` is the report printed on stdout: the machine, the paired
figures (direct | mlstream | ratio or overhead), the goals, the generator's CPU.
Both only read the dict, so an old JSON file can be re-rendered:
``python -m bench.report bench/results/full.json``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _get(d: Any, *keys: Any) -> Any:
    for key in keys:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def fmt(value: Any, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    if isinstance(value, float):
        if value != value:
            return "—"
        if abs(value) >= 1000:
            return f"{value:,.0f}{unit}"
        return f"{value:.{digits}f}{unit}"
    return f"{value}{unit}"


def _ratio(a: Any, b: Any) -> str:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return "—"
    return f"{a / b:.2f}×"


def _over(a: Any, b: Any, unit: str = " ms") -> str:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return "—"
    return f"{a - b:+.2f}{unit}"


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    s = results.get("scenarios", {})
    rows: list[dict[str, Any]] = []

    def add(figure: str, goal: str, measured: str, met: bool | None) -> None:
        rows.append({"figure": figure, "goal": goal, "measured": measured, "met": met})

    c16 = _get(s, "relay_throughput", "concurrency", "16")
    if c16:
        rate, r = _get(c16, "mlstream", "chunks_per_s"), c16.get("ratio_chunks")
        met = rate is not None and r is not None and rate >= 15000 and r >= 0.25
        stretch = " (stretch 0.5 met)" if r is not None and r >= 0.5 else ""
        add("relay throughput, concurrency 16", "≥ 15,000 chunks/s and ≥ 0.25 × direct (stretch 0.5)",
            f"{fmt(rate)} chunks/s, {fmt(r)} × direct{stretch}", met)
    lat = s.get("added_latency") or {}
    for key, figure in (("stream_c1", "added time to first token, concurrency 1, p50"),
                        ("non_stream_c1", "added non-stream latency, concurrency 1, p50")):
        over = _get(lat, key, "overhead_ms_p50")
        if key in lat:
            added = _get(lat, key, "added_ms") or {}
            more = ""
            if added:
                more = f" (p90 {_plus(added.get('p90'))}, p99 {_plus(added.get('p99'))}"
                b2b = _get(lat, f"{key}_back_to_back", "added_ms", "p50")
                more += f"; back to back {_plus(b2b)})" if b2b is not None else ")"
            add(figure, "≤ 1 ms", f"{_plus(over)}{more}", over is not None and over <= 1.0)
    client = lat.get("client") or {}
    for key, figure in (("long_back_to_back", "added time to first token after a 200-chunk answer, back to back"),
                        ("short_back_to_back", "added time to first token after a 5-chunk answer, back to back"),
                        ("long_paused", "added time to first token after a 200-chunk answer, paused")):
        over = _get(client, key, "overhead_ms_p50")
        if key in client:
            add(f"{figure}, c=1, p50 (every event parsed)", "≤ 1 ms",
                f"{_plus(over)} (p90 {_plus(_get(client, key, 'added_ms', 'p90'))})",
                over is not None and over <= 1.0)
    slow = _get(s, "slow_streams", "slow")
    if slow:
        ml = slow["mlstream"]
        add(f"{slow['mlstream']['streams']} slow streams ({_interval(slow['model'])} ms)",
            "100 % complete on pace, 0 errors",
            f"{ml['completion'] * 100:.1f} % complete, p99 gap {fmt(ml['gap_ms']['p99'], ' ms')}, "
            f"errors {sum(ml['errors'].values())}, at most {fmt(ml.get('streams_streaming_peak'))} streaming at once",
            bool(ml["on_pace"]) and not ml["errors"])
    cap = _get(s, "slow_streams", "capacity")
    if cap:
        level = cap["capacity"]["mlstream"]
        bound = "≥ " if cap.get("reached_top_level") else ""
        dbound = "" if cap.get("direct_off_pace_too") else "≥ "
        add("on-pace capacity at 20 ms between chunks", "≥ 160 concurrent streams",
            f"{bound}{level} streams (direct {dbound}{cap['capacity']['direct']})", level >= 160)
    front = s.get("openai_front") or {}
    for c, level in (front.get("relay") or {}).items():
        r = level.get("openai_over_ml_commons")
        add(f"OpenAI front relay, concurrency {c}", "within 10 % of _predict/stream (× direct, same run)",
            f"{fmt(_get(level, 'openai', 'ratio_chunks'))} × direct vs {fmt(_get(level, 'ml_commons', 'ratio_chunks'))}"
            f" × direct: {fmt(r)}", r is not None and r >= 0.9)
    translated = front.get("translated")
    if translated:
        r = translated.get("openai_over_ml_commons")
        add(f"OpenAI front, translated relay ({translated['provider']}), concurrency {translated['concurrency']}",
            "within 10 % of _predict/stream (same run, one pooled direct figure)",
            f"{fmt(_get(translated, 'openai', 'mlstream', 'chunks_per_s'))} vs "
            f"{fmt(_get(translated, 'ml_commons', 'mlstream', 'chunks_per_s'))} chunks/s "
            f"(direct {fmt(translated.get('direct_pooled_chunks_per_s'))}): {fmt(r)}", r is not None and r >= 0.9)
    first = front.get("first_token_c1")
    if first:
        r = first.get("openai_over_ml_commons_p50")
        add("OpenAI front first token, concurrency 1, p50", "within 10 % of _predict/stream",
            f"{fmt(_get(first, 'openai', 'ms', 'p50'), ' ms', 3)} vs {fmt(_get(first, 'ml_commons', 'ms', 'p50'), ' ms', 3)}"
            f" (direct {fmt(_get(first, 'direct', 'ms', 'p50'), ' ms', 3)}): {fmt(r)}", r is not None and r <= 1.1)
    fronts = s.get("new_fronts") or {}
    for c, level in (fronts.get("relay") or {}).items():
        for front, name in (("messages", "Messages"), ("responses", "Responses")):
            r = level.get(f"{front}_over_ml_commons")
            add(f"{name} front relay, concurrency {c}",
                "within 10 % of _predict/stream (same run, rounds interleaved, one pooled direct figure)",
                f"{fmt(_get(level, front, 'mlstream', 'chunks_per_s'))} vs "
                f"{fmt(_get(level, 'ml_commons', 'mlstream', 'chunks_per_s'))} chunks/s "
                f"({fmt(_get(level, front, 'ratio_chunks'))} vs {fmt(_get(level, 'ml_commons', 'ratio_chunks'))} "
                f"× direct): {fmt(r)}", r is not None and r >= 0.9)
    first_new = fronts.get("first_token_c1")
    if first_new:
        for front, name in (("messages", "Messages"), ("responses", "Responses")):
            r = first_new.get(f"{front}_over_ml_commons_p50")
            add(f"{name} front first token, concurrency 1, p50", "within 10 % of _predict/stream",
                f"{fmt(_get(first_new, front, 'ms', 'p50'), ' ms', 3)} vs "
                f"{fmt(_get(first_new, 'ml_commons', 'ms', 'p50'), ' ms', 3)}: {fmt(r)}", r is not None and r <= 1.1)
    relayed = fronts.get("anthropic_relay")
    if relayed:
        r = relayed.get("messages_over_ml_commons")
        add(f"Messages front, Anthropic model relayed, concurrency {relayed['concurrency']}",
            "within 10 % of _predict/stream (same run, one pooled direct figure)",
            f"{fmt(_get(relayed, 'messages', 'mlstream', 'chunks_per_s'))} vs "
            f"{fmt(_get(relayed, 'ml_commons', 'mlstream', 'chunks_per_s'))} chunks/s: {fmt(r)}",
            r is not None and r >= 0.9)
    script = _get(s, "embedding_predict", "script_vs_builtin")
    if script:
        r = script.get("script_over_builtin_p50")
        add(f"_predict of {script['docs']} embeddings, Painless post-process vs built-in, c=1 p50",
            f"≤ {script['goal']} × the built-in path",
            f"{fmt(_get(script, 'script', 'ms', 'p50'), ' ms', 3)} vs {fmt(_get(script, 'builtin', 'ms', 'p50'), ' ms', 3)}"
            f" (direct {fmt(_get(script, 'direct', 'ms', 'p50'), ' ms', 3)}): {fmt(r)}",
            r is not None and r <= script["goal"])
    idle = results.get("idle", {})
    if idle:
        mb = idle.get("rss_kb", 0) / 1024
        add("idle server RSS", "≤ 40 MB", f"{mb:.1f} MB", mb <= 40)
    cache = s.get("cache")
    if cache and cache.get("hit_added_over_store_read_ms_p50") is not None:
        over = cache["hit_added_over_store_read_ms_p50"]
        add("response cache hit: first token over direct + one store read, c=1, p50", "≤ 1 ms",
            f"{_plus(over)} (store read {fmt(cache['store_read_ms_p50'], ' ms')})", over <= 1.0)
    if slow:
        kb = slow["server_rss_per_stream_kb"]
        add("server memory per open stream", "≤ 100 KB",
            f"{fmt(kb, ' KB')} ({fmt(slow['mlstream'].get('streams_active_peak'))} streams open)", kb <= 100)
    bp = s.get("backpressure")
    if bp and "mlstream" in bp:
        m = bp["mlstream"]
        growth_mb = (m["server_rss_growth_kb"] or 0) / 1024
        met = bool(bp["bounded"]) and growth_mb <= 10 and bool(m["resumed_whole"])
        add("slow consumer", "provider blocked after ≤ queue + socket buffers; RSS growth ≤ 10 MB",
            f"provider wrote {m['provider_share_at_stall'] * 100:.1f} % of the answer "
            f"({fmt(m['provider_bytes_at_stall'])} B); held in mlstream ≈ {fmt(bp['held_in_mlstream_chunks'])} "
            f"chunks of ≤ {fmt(bp['allowance_chunks'])} allowed; RSS +{growth_mb:.1f} MB; "
            f"resumed whole: {fmt(m['resumed_whole'])}", met)
    cancel = _get(s, "cancellation", "paced")
    if cancel:
        p99 = _get(cancel, "mlstream", "worker_free_ms", "p99")
        add(f"disconnect → worker free, p99 (provider sends every {cancel['provider_interval_ms']} ms)",
            "≤ 50 ms", fmt(p99, " ms"), p99 is not None and p99 <= 50)
    adm = s.get("admission")
    if adm and "mlstream" in adm:
        p99 = _get(adm, "mlstream", "refusal_ms", "p99")
        add("429 refusal latency, p99", "≤ 5 ms", fmt(p99, " ms"), p99 is not None and p99 <= 5)
    churn = s.get("churn")
    if churn and "kinds" in churn:
        lim, srv = churn["limits"], churn["server"]
        worst = max((k["worst_over_expected"] or 0 for k in churn["kinds"].values()), default=0)
        add(f"keep-alive churn soak ({fmt(churn['seconds'], ' s', 0)}, {churn['clients']} clients)",
            f"0 errors; no request > {fmt(lim['slow_factor'], '', 0)} × expected; "
            f"never {fmt(lim['max_start_gap_s'], ' s', 0)} without a stream starting "
            f"nor {fmt(lim['max_stall_s'], ' s', 0)} without a request completing; "
            "threads and fds as before",
            f"{fmt(churn['ok'])} of {fmt(churn['requests'])} ok; worst {worst:.1f} × expected; longest "
            f"{fmt(churn['longest_start_gap_s'] * 1000, ' ms', 0)} without a stream starting, "
            f"{fmt(churn['longest_stall_s'] * 1000, ' ms', 0)} without a completion; threads "
            f"{srv['threads_before']} → {srv['threads_after']}, fds {srv['fds_before']['total']} → "
            f"{srv['fds_after']['total']}, RSS {srv['rss_kb_before'] / 1024:.1f} → "
            f"{srv['rss_kb_after'] / 1024:.1f} MB",
            bool(churn.get("passed")))
    return rows


def _plus(ms: Any) -> str:
    return f"{ms:+.2f} ms" if isinstance(ms, (int, float)) else "—"


def _interval(model: str) -> str:
    for part in model.split("?", 1)[-1].split("&"):
        if part.startswith("delay_ms="):
            return part.split("=", 1)[1]
    return "?"


def paired_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(scenario, figure, direct, mlstream, mlstream vs direct)."""
    s = results.get("scenarios", {})
    rows: list[tuple[str, str, str, str, str]] = []
    tp = s.get("relay_throughput")
    if tp and "concurrency" in tp:
        for c, level in tp["concurrency"].items():
            d, m = level["direct"], level["mlstream"]
            rows.append(("1 relay", f"chunks/s, c={c}", fmt(d["chunks_per_s"]), fmt(m["chunks_per_s"]),
                         _ratio(m["chunks_per_s"], d["chunks_per_s"])))
            rows.append(("1 relay", f"MB/s on the wire, c={c}", fmt(d["mb_per_s"]), fmt(m["mb_per_s"]),
                         _ratio(m["mb_per_s"], d["mb_per_s"])))
            rows.append(("1 relay", f"streams ok, c={c}", f"{d['streams_ok']}/{d['streams_total']}",
                         f"{m['streams_ok']}/{m['streams_total']}", ""))
    providers = _get(s, "provider_relay", "providers") or {}
    c = _get(s, "provider_relay", "concurrency")
    for level in providers.values():
        d, m = level["direct"], level["mlstream"]
        rows.append(("9 providers", f"{level['interface']} chunks/s, c={c}", fmt(d["chunks_per_s"]),
                     fmt(m["chunks_per_s"]), _ratio(m["chunks_per_s"], d["chunks_per_s"])))
        rows.append(("9 providers", f"{level['interface']} streams ok, c={c}", f"{d['streams_ok']}/{d['streams_total']}",
                     f"{m['streams_ok']}/{m['streams_total']}", ""))
    lat = s.get("added_latency") or {}
    pause = lat.get("pause_ms")
    for key, name in (("stream_c1", f"first token, c=1, alternated, {fmt(pause, ' ms', 0)} apart"),
                      ("stream_c1_back_to_back", "first token, c=1, alternated, back to back"),
                      ("stream_c64", "first token, c=64"),
                      ("non_stream_c1", f"non-stream, c=1, alternated, {fmt(pause, ' ms', 0)} apart"),
                      ("non_stream_c64", "non-stream, c=64")):
        e = lat.get(key)
        if not e:
            continue
        added = e.get("added_ms")
        for p in (("p50", "p90", "p99") if added else ("p50", "p99")):
            dv, mv = e["direct"]["ms"][p], e["mlstream"]["ms"][p]
            # c=1: the added time pair by pair (its own percentile), else the difference of percentiles
            over = _plus(added[p]) if added else _over(mv, dv)
            rows.append(("2 latency", f"{name} {p} (ms)", fmt(dv, digits=3), fmt(mv, digits=3), over))
    for key, e in (lat.get("client") or {}).items():
        if not isinstance(e, dict) or "added_ms" not in e:
            continue
        name = f"first token, c=1, {key.replace('_', ' ')} ({e['model'].split('?')[1]}), every event parsed"
        for p in ("p50", "p90", "p99"):
            rows.append(("2 latency", f"{name} {p} (ms)", fmt(e["direct"]["ms"][p], digits=3),
                         fmt(e["mlstream"]["ms"][p], digits=3), _plus(e["added_ms"][p])))
    slow = _get(s, "slow_streams", "slow")
    if slow:
        d, m = slow["direct"], slow["mlstream"]
        n = m["streams"]
        rows.append(("3 slow", f"{n} streams complete", f"{d['ok']}/{n}", f"{m['ok']}/{n}", ""))
        rows.append(("3 slow", "streams delivering at once, peak (client's view)", fmt(d.get("streams_streaming_peak")),
                     fmt(m.get("streams_streaming_peak")), ""))
        rows.append(("3 slow", "errors", fmt(sum(d["errors"].values())), fmt(sum(m["errors"].values())), ""))
        for p in ("p50", "p99", "max"):
            dv, mv = d["gap_ms"][p], m["gap_ms"][p]
            rows.append(("3 slow", f"gap between events {p} (ms)", fmt(dv), fmt(mv), _over(mv, dv)))
        rows.append(("3 slow", "stream duration / ideal, p99", fmt(d["duration_over_ideal_p99"]),
                     fmt(m["duration_over_ideal_p99"]), ""))
        dv, mv = d["ttfe_ms"]["p99"], m["ttfe_ms"]["p99"]
        rows.append(("3 slow", "first event p99 (ms)", fmt(dv), fmt(mv), _over(mv, dv)))
        rows.append(("3 slow", "accept queue peak (connections)", fmt(d.get("fake_accept_queue_peak")),
                     fmt(m.get("server_accept_queue_peak")), ""))
        rows.append(("3 slow", "generator CPU (share of one core)", fmt(d["generator_cpu"]), fmt(m["generator_cpu"]),
                     ""))
        rows.append(("3 slow", "server RSS idle → peak (MB)", "",
                     f"{slow['server_idle_rss_kb'] / 1024:.1f} → {m['server_rss_kb_peak'] / 1024:.1f}", ""))
        rows.append(("3 slow", "server streams active, peak (/metrics)", "", fmt(m.get("streams_active_peak")), ""))
        rows.append(("3 slow", "server RSS per open stream (KB)", "", fmt(slow["server_rss_per_stream_kb"]), ""))
        rows.append(("3 slow", "server threads idle → peak", "",
                     f"{slow['server_idle_threads']} → {m['server_threads_peak']}", ""))
    cap = _get(s, "slow_streams", "capacity")
    if cap:
        direct_cap = cap["capacity"]["direct"]
        # the direct side is only stepped as far as mlstream goes: unless it fell off pace, it is a lower bound
        direct_text = fmt(direct_cap) if cap.get("direct_off_pace_too") else f"≥ {fmt(direct_cap)}"
        rows.append(("3 capacity", "on pace at 20 ms (streams)", direct_text, fmt(cap["capacity"]["mlstream"]),
                     _ratio(cap["capacity"]["mlstream"], direct_cap) if cap.get("direct_off_pace_too") else ""))
    bp = s.get("backpressure")
    if bp and "mlstream" in bp:
        d, m = bp["direct"], bp["mlstream"]
        rows.append(("4 backpressure", "provider bytes written while paused",
                     f"{fmt(d['provider_bytes_at_stall'])} ({d['provider_share_at_stall'] * 100:.1f} %)",
                     f"{fmt(m['provider_bytes_at_stall'])} ({m['provider_share_at_stall'] * 100:.1f} %)",
                     f"{bp['extra_bytes_through_mlstream']:+,} B"))
        rows.append(("4 backpressure", "answer size (bytes)", fmt(d["answer_bytes"]), fmt(m["answer_bytes"]), ""))
        rows.append(("4 backpressure", "server RSS growth while paused", "",
                     f"{(m['server_rss_growth_kb'] or 0) / 1024:.1f} MB", ""))
        rows.append(("4 backpressure", "answer whole after resuming", fmt(d["resumed_whole"]),
                     fmt(m["resumed_whole"]), ""))
    cancel = s.get("cancellation") or {}
    for variant, label in (("paced", ""), ("slow_provider", " (slow provider)")):
        v = cancel.get(variant)
        if not v or "direct" not in v:
            continue
        every = f"every {v['provider_interval_ms']} ms"
        for p in ("p50", "p99"):
            dv = v["direct"]["upstream_closed_ms"][p]
            mv = v["mlstream"]["upstream_closed_ms"][p]
            rows.append((f"5 cancel{label}", f"disconnect → upstream closed {p} (ms), {every}", fmt(dv), fmt(mv),
                         _over(mv, dv)))
        for p in ("p50", "p99"):
            rows.append((f"5 cancel{label}", f"disconnect → worker free {p} (ms), {every}", "",
                         fmt(v["mlstream"]["worker_free_ms"][p]), ""))
    adm = s.get("admission")
    if adm and "mlstream" in adm:
        for p in ("p50", "p99"):
            dv, mv = adm["direct"]["refusal_ms"][p], adm["mlstream"]["refusal_ms"][p]
            rows.append(("6 admission", f"429 latency {p} (ms)", fmt(dv, digits=3), fmt(mv, digits=3), _over(mv, dv)))
        rows.append(("6 admission", "probes refused with 429", f"{adm['direct']['refused_429']}/{adm['direct']['probes']}",
                     f"{adm['mlstream']['refused_429']}/{adm['mlstream']['probes']}", ""))
        base, loaded = adm["accepted_baseline"], adm["accepted_with_probes"]
        rows.append(("6 admission", "accepted streams ok: alone → under refusals", "",
                     f"{base['ok']}/{base['total']} → {loaded['ok']}/{loaded['total']}", ""))
        rows.append(("6 admission", "accepted streams p99 gap (ms): alone → under refusals", "",
                     f"{fmt(base['gap_ms']['p99'])} → {fmt(loaded['gap_ms']['p99'])}", ""))
    churn = s.get("churn")
    if churn and "kinds" in churn:
        # direct column: the request alone, straight to the fake (what "expected" is built from)
        for name, k in churn["kinds"].items():
            ms = k["ms"]
            figure = f"{name} × {k['clients']}: ok/requests, p50 / max (ms), limit {fmt(k['limit_ms'], '', 0)}"
            rows.append(("7 churn", figure,
                         fmt(k["direct_alone_ms"]),
                         f"{fmt(k['ok'])}/{fmt(k['requests'])}, {fmt(ms['p50'], digits=0)} / {fmt(ms['max'], digits=0)}"
                         + (f", {k['slow']} slow" if k["slow"] else ""), ""))
        rows.append(("7 churn", "longest time without a stream starting / a request completing (ms)", "",
                     f"{fmt(churn['longest_start_gap_s'] * 1000, digits=0)} / "
                     f"{fmt(churn['longest_stall_s'] * 1000, digits=0)}",
                     ""))
        srv = churn["server"]
        rows.append(("7 churn", "server threads before → after (peak)", "",
                     f"{srv['threads_before']} → {srv['threads_after']} ({srv['threads_peak']})", ""))
        rows.append(("7 churn", "server fds before → after (peak)", "",
                     f"{srv['fds_before']['total']} → {srv['fds_after']['total']} ({srv['fds_peak']})", ""))
        rows.append(("7 churn", "server RSS before → after (MB)", "",
                     f"{srv['rss_kb_before'] / 1024:.1f} → {srv['rss_kb_after'] / 1024:.1f}", ""))
    for c, level in (_get(s, "openai_front", "relay") or {}).items():
        for front in ("ml_commons", "openai"):
            d, m = level[front]["direct"], level[front]["mlstream"]
            rows.append(("10 OpenAI front", f"{front} chunks/s, c={c}", fmt(d["chunks_per_s"]), fmt(m["chunks_per_s"]),
                         _ratio(m["chunks_per_s"], d["chunks_per_s"])))
    translated = _get(s, "openai_front", "translated")
    if translated:
        for front in ("ml_commons", "openai"):
            d, m = translated[front]["direct"], translated[front]["mlstream"]
            rows.append(("10 OpenAI front", f"{translated['provider']} {front} chunks/s, c={translated['concurrency']}",
                         fmt(d["chunks_per_s"]), fmt(m["chunks_per_s"]), _ratio(m["chunks_per_s"], d["chunks_per_s"])))
    first = _get(s, "openai_front", "first_token_c1")
    if first:
        for front in ("ml_commons", "openai"):
            rows.append(("10 OpenAI front", f"{front} first token, c=1 p50 (ms)", fmt(first["direct"]["ms"]["p50"], digits=3),
                         fmt(first[front]["ms"]["p50"], digits=3), _plus(first[front]["added_ms"]["p50"])))
    for c, level in (_get(s, "new_fronts", "relay") or {}).items():
        for front in ("ml_commons", "messages", "responses"):
            d, m = level[front]["direct"], level[front]["mlstream"]
            rows.append(("11 Messages, Responses", f"{front} chunks/s, c={c}", fmt(d["chunks_per_s"]),
                         fmt(m["chunks_per_s"]), _ratio(m["chunks_per_s"], d["chunks_per_s"])))
    first_new = _get(s, "new_fronts", "first_token_c1")
    if first_new:
        for front in ("ml_commons", "messages", "responses"):
            rows.append(("11 Messages, Responses", f"{front} first token, c=1 p50 (ms)",
                         fmt(first_new["direct"]["ms"]["p50"], digits=3), fmt(first_new[front]["ms"]["p50"], digits=3),
                         _plus(first_new[front]["added_ms"]["p50"])))
    relayed = _get(s, "new_fronts", "anthropic_relay")
    if relayed:
        for front in ("ml_commons", "messages"):
            d, m = relayed[front]["direct"], relayed[front]["mlstream"]
            rows.append(("11 Messages, Responses", f"{relayed['provider']} {front} chunks/s, c={relayed['concurrency']}",
                         fmt(d["chunks_per_s"]), fmt(m["chunks_per_s"]), _ratio(m["chunks_per_s"], d["chunks_per_s"])))
    for c, level in (_get(s, "router", "relay") or {}).items():
        for side in ("plain", "router"):
            d, m = level[side]["direct"], level[side]["mlstream"]
            rows.append(("12 router", f"{side} chunks/s, c={c}", fmt(d["chunks_per_s"]), fmt(m["chunks_per_s"]),
                         _ratio(m["chunks_per_s"], d["chunks_per_s"])))
    for name, what in (("first_token_c1", "first token"), ("whole_c1", "non-stream")):
        figures = _get(s, "router", name)
        if figures:
            for side in ("plain", "router"):
                rows.append(("12 router", f"{side} {what}, c=1 p50 (ms)", fmt(figures["direct"]["ms"]["p50"], digits=3),
                             fmt(figures[side]["ms"]["p50"], digits=3), _plus(figures[side]["added_ms"]["p50"])))
    for name, what in (("first_token_c1", "first token"), ("whole_c1", "non-stream")):
        figures = _get(s, "cache", name)
        if figures:
            for side in ("plain", "hit"):
                rows.append(("14 cache", f"{side} {what}, c=1 p50 (ms)", fmt(figures["direct"]["ms"]["p50"], digits=3),
                             fmt(figures[side]["ms"]["p50"], digits=3), _plus(figures[side]["added_ms"]["p50"])))
    emb = s.get("embedding_predict")
    if emb and "docs" in emb:
        for n, e in emb["docs"].items():
            for p in ("p50", "p99"):
                rows.append(("8 embeddings", f"_predict, {n} docs × {emb['dimensions']} floats, c=1 {p} (ms)",
                             fmt(e["direct"]["ms"][p], digits=3), fmt(e["mlstream"]["ms"][p], digits=3),
                             _plus(e["added_ms"][p])))
        prof = emb.get("post_process_profile")
        if prof:
            rows.append(("8 embeddings", f"one {prof['docs']}-doc answer: decode / post-process / encode (ms), "
                                         f"{prof['codec']} (stdlib decode / encode)", "",
                         f"{fmt(prof['decode_ms'])} / {fmt(prof['post_process_ms'])} / {fmt(prof['encode_ms'])}",
                         f"({fmt(prof['stdlib_decode_ms'])} / {fmt(prof['stdlib_encode_ms'])})"))
            if "painless_post_process_ms" in prof:
                rows.append(("8 embeddings", f"one {prof['docs']}-doc answer through a Painless post-process "
                                             "script: whole step / script run (ms)", "",
                             f"{fmt(prof['painless_post_process_ms'])} / {fmt(prof['painless_script_run_ms'])}",
                             _printed_run(prof)))
            if "painless_float_loop_ms" in prof:
                rows.append(("8 embeddings", (f"one {prof['docs']}-doc answer through a Painless script looping "
                                              "over every float: whole step (ms)"), "",
                             fmt(prof["painless_float_loop_ms"]), ""))
            if "painless_float_loop_run_closures_ms" in prof:
                closures, run = prof["painless_float_loop_run_closures_ms"], prof["painless_float_loop_run_ms"]
                rows.append(("8 embeddings", ("the per-float loop's run: closures vs translated to Python (ms; "
                                              "µs a number)"), fmt(closures), fmt(run),
                             f"{closures / run:.1f}× faster; {1000 * run / prof['numbers']:.2f} µs a number"))
                rows.append(("8 embeddings", (f"one {prof['docs']}-doc answer through the same script over int8 "
                                              "values (the tutorial's case): whole step (ms)"), "",
                             fmt(prof["painless_int8_loop_ms"]), ""))
        script = emb.get("script_vs_builtin")
        if script:
            for p in ("p50", "p99"):
                rows.append(("8 embeddings", (f"_predict, {script['docs']} docs, built-in vs Painless post-process, "
                                              f"c=1 {p} (ms)"), fmt(script["builtin"]["ms"][p], digits=3),
                             fmt(script["script"]["ms"][p], digits=3), _plus(script["script_added_ms"][p])))
    return rows


def _printed_run(prof: dict[str, Any]) -> str:
    printed = prof.get("painless_script_run_printed_ms")
    return f"(String printed whole: {fmt(printed)})" if printed is not None else ""


def _source(source: dict[str, Any]) -> str:
    if source.get("mlstream_src"):
        return f" mlstream servers run from {source['mlstream_src']} (BENCH_MLSTREAM_SRC)."
    if not source.get("commit"):
        return ""
    dirty = " plus uncommitted changes to mlstream/" if source.get("dirty") else ""
    return f" mlstream at {source['commit'][:10]}{dirty}."


def _load(results: dict[str, Any]) -> str:
    start, end = results.get("load_average_at_start"), results.get("load_average_at_end")
    if not start or not end:
        return ""
    return (f" Load average (1 min) {start[0]:.1f} at start, {end[0]:.1f} at end: anything well above 2 means "
            "other work shared these cores.")


def render(results: dict[str, Any]) -> str:
    machine = results.get("machine", {})
    lines = [f"## mlstream benchmark — {results.get('name', '?')} ({results.get('mode', '?')})", "",
             f"Machine: {machine.get('cores')} cores ({machine.get('cpu_model', '?')}), Python "
             f"{machine.get('python')}, {machine.get('platform', '')}. Wall time "
             f"{results.get('wall_seconds', 0):.0f} s.{_source(results.get('source') or {})}{_load(results)}", ""]
    failed = {k: v["error"] for k, v in results.get("scenarios", {}).items() if isinstance(v, dict) and "error" in v}
    lines += ["| scenario | figure | direct | mlstream | mlstream vs direct |", "|---|---|---:|---:|---:|"]
    lines += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in paired_rows(results)]
    lines += ["", "| goal | target (2 cores) | measured | met |", "|---|---|---|---|"]
    for g in results.get("goals", goals(results)):
        met = "—" if g["met"] is None else ("yes" if g["met"] else "**no**")
        lines.append(f"| {g['figure']} | {g['goal']} | {g['measured']} | {met} |")
    gen = results.get("generator", {})
    if gen:
        lines += ["", f"Load generator: one thread, {gen.get('runs', 0)} runs, CPU {gen.get('cpu_seconds', 0):.1f} s "
                      f"over {gen.get('wall_seconds', 0):.1f} s of load ({gen.get('share', 0) * 100:.0f} % of one core "
                      f"on average, busiest run {gen.get('busiest_share', 0) * 100:.0f} %: {gen.get('busiest_label', '')})."]
    otel = results.get("otel")
    if otel:
        lines.append(f"Tracing on: every mlstream server exported to a collector on loopback "
                     f"({otel.get('trace_exports', 0)} span exports, {otel.get('metric_exports', 0)} metric exports, "
                     f"{otel.get('bytes_received', 0) / 1e6:.1f} MB).")
    idle = results.get("idle", {})
    if idle:
        lines.append(f"Main mlstream server: idle RSS {idle.get('rss_kb', 0) / 1024:.1f} MB "
                     f"({idle.get('threads')} threads) at start, {idle.get('rss_kb_after_run', 0) / 1024:.1f} MB "
                     "after the run.")
    for name, error in failed.items():
        lines += ["", f"**{name} failed**: {error.strip().splitlines()[-1] if error.strip() else error}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(render(json.load(f)))
