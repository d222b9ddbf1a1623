#!/usr/bin/env python3
"""End-to-end check of bibliotecario's MCP server with the official Python SDK (PyPI `mcp`).

Started by crates/cli/tests/server_mcp.rs (which builds the wiki, ingests it, and starts
`bib serve` for the HTTP transport). Run by hand:

    .venv-test/bin/python tests/python/mcp_client_test.py stdio --bib target/debug/bib \
        --store kb.sqlite --token "$BIB_TOKEN" --expect-path guides/restore.md \
        --question "how are packages restored"
    .venv-test/bin/python tests/python/mcp_client_test.py http --url http://127.0.0.1:8080/mcp \
        --token "$BIB_TOKEN" ...

Every check raises on failure (exit status 1, message on stderr). On success the last stdout
line is a JSON summary (`{"transport": ..., "registered_path": ..., "refused_path": ...}`) the
Rust test uses to check the store afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

TOOLS = {"bib_ask", "bib_get", "bib_status", "bib_eval_retrieval", "bib_register_doc", "bib_index_chunks", "bib_pack"}
INVALID_PARAMS = -32602


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


@asynccontextmanager
async def connect(args: argparse.Namespace, with_auth: bool) -> AsyncIterator[ClientSession]:
    """A session over the chosen transport. `with_auth`: send the bearer header (HTTP only)."""
    if args.transport == "stdio":
        # The SDK passes only a few variables to the child; keep the model's location.
        env = {k: os.environ[k] for k in ("BIB_MODEL_DIR", "XDG_CACHE_HOME") if k in os.environ}
        env.update({"BIB_TOKEN": args.token, "BIB_LOG": "warn"})
        params = StdioServerParameters(
            command=args.bib, args=["mcp", "--store", args.store], env=env, cwd=args.cwd
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                yield session
    else:
        headers = {"Authorization": f"Bearer {args.token}"} if with_auth else {}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            async with streamable_http_client(args.url, http_client=http) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    yield session


def structured(result: Any, what: str, text_is_json: bool = True) -> dict:
    """The structured content of a successful call, checked against its text copy (JSON for
    most tools; `bib_ask` and `bib_get` answer text an agent reads, checked by the caller)."""
    check(not result.is_error, f"{what}: unexpected error result: {result.content}")
    data = result.structured_content
    check(isinstance(data, dict), f"{what}: no structured content")
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    check(len(texts) >= 1, f"{what}: no text content")
    if text_is_json:
        check(json.loads(texts[0]) == data, f"{what}: text and structured content differ")
    return data


def text_of(result: Any) -> str:
    return next(c.text for c in result.content if getattr(c, "type", None) == "text")


def citation(r: dict) -> str:
    """`path:12-30` as bib cites a result (`path:12` for one line, `path` when lines are unknown)."""
    if r["line_start"] == 0:
        return r["path"]
    lines = f"{r['line_start']}" if r["line_end"] <= r["line_start"] else f"{r['line_start']}-{r['line_end']}"
    return f"{r['path']}:{lines}"


def check_ask_markdown(result: Any, data: dict, what: str) -> str:
    """bib_ask's text: compact Markdown, every result's citation and text, no scores or ranks."""
    md = text_of(result)
    check(not md.lstrip().startswith("{"), f"{what}: text content is JSON, not Markdown")
    for r in data["results"]:
        cite = " › ".join([citation(r)] + r["heading_path"])
        check(cite in md, f"{what}: citation {cite!r} missing from the text:\n{md}")
    for noise in ['"score"', "bm25_", "vector_rank", "tokens_before", "chunk_id"]:
        check(noise not in md, f"{what}: the text carries {noise!r}:\n{md}")
    check(len(md) < len(json.dumps(data)), f"{what}: the text is not smaller than the JSON")
    return md


async def expect_invalid_params(session: ClientSession, tool: str, arguments: dict, field: str) -> str:
    try:
        result = await session.call_tool(tool, arguments)
    except MCPError as e:
        check(e.code == INVALID_PARAMS, f"{tool}: expected invalid_params, got code {e.code}: {e.message}")
        check(field in e.message, f"{tool}: error does not name `{field}`: {e.message}")
        if isinstance(e.data, dict):
            check(e.data.get("field") == field, f"{tool}: data.field is {e.data.get('field')!r}, want {field!r}")
        return e.message
    raise AssertionError(f"{tool} with {arguments} succeeded (is_error={result.is_error}); expected invalid_params")


async def run(args: argparse.Namespace) -> dict:
    summary: dict[str, Any] = {"transport": args.transport}
    unique = f"zorblatt{args.transport}"
    refused_path = f"notes/refused-{args.transport}.md"
    registered_path = f"notes/added-{args.transport}.md"

    # ── a session that presents no credentials ──────────────────────────────────────
    async with connect(args, with_auth=False) as s:
        init = await s.initialize()
        check(init.server_info.name == "bibliotecario", f"server name is {init.server_info.name!r}")
        check(bool(init.server_info.version), "server version is empty")
        summary["server"] = f"{init.server_info.name} {init.server_info.version}"
        summary["protocol"] = init.protocol_version

        tools = (await s.list_tools()).tools
        names = {t.name for t in tools}
        check(names == TOOLS, f"tools are {sorted(names)}")
        for t in tools:
            check(t.input_schema.get("type") == "object", f"{t.name}: input schema is not an object")
            check(t.input_schema.get("additionalProperties") is False, f"{t.name}: unknown fields allowed")
            check(bool(t.description), f"{t.name}: no description")
        ask_tool = next(t for t in tools if t.name == "bib_ask")
        for p in ["query", "top_k", "mode", "trim", "trim_threshold", "trim_window", "filters"]:
            check(p in ask_tool.input_schema["properties"], f"bib_ask schema lacks {p}")

        # bib_ask: the expected page ranks in the top 3; the text is compact Markdown.
        raw = await s.call_tool("bib_ask", {"query": args.question, "top_k": 3})
        ask = structured(raw, "bib_ask", text_is_json=False)
        paths = [r["path"] for r in ask["results"]]
        check(args.expect_path in paths, f"bib_ask: {args.expect_path} not in {paths}")
        check(ask["tokens_before"] > 0, "bib_ask: no tokens counted")
        check(ask["no_good_match"] is False, f"bib_ask: an answerable question is no good match: {ask}")
        check_ask_markdown(raw, ask, "bib_ask")
        summary["ask_paths"] = paths

        # bib_get opens exactly the lines the first result cites.
        first = ask["results"][0]
        raw_get = await s.call_tool(
            "bib_get", {"path": first["path"], "from": first["line_start"], "to": first["line_end"]}
        )
        got = structured(raw_get, "bib_get", text_is_json=False)
        check((got["line_start"], got["line_end"]) == (first["line_start"], first["line_end"]), f"bib_get: {got}")
        check(got["content"] in text_of(raw_get), "bib_get: the text does not carry the lines")
        check(citation(first) in text_of(raw_get), "bib_get: the text does not name the citation")
        whole = structured(await s.call_tool("bib_get", {"path": first["path"]}), "bib_get whole", text_is_json=False)
        lines = whole["content"].splitlines(keepends=True)
        check("".join(lines[first["line_start"] - 1:first["line_end"]]) == got["content"],
              "bib_get: the range is not those lines of the whole document")
        missing = await s.call_tool("bib_get", {"path": args.expect_path.replace(".md", "s.md")})
        check(missing.is_error, "bib_get of an unknown path did not fail")
        err = (missing.structured_content or {}).get("error", {})
        check(err.get("code") == "not_found" and args.expect_path in err.get("message", ""),
              f"bib_get unknown path: {err}")
        await expect_invalid_params(
            s, "bib_get", {"path": first["path"], "from": whole["total_lines"] + 1}, "from"
        )
        summary["get"] = citation(first)

        # bib_status: the collections `bib status --json` reports.
        status = structured(await s.call_tool("bib_status", {}), "bib_status")
        check(status["backend"] == "sqlite" and status["collections"], f"bib_status: {status}")
        check(sum(c["documents"] for c in status["collections"]) >= 3, f"bib_status: {status}")
        summary["status_collections"] = [c["name"] for c in status["collections"]]

        # An out-of-domain question: no good match, said in the text and in the JSON.
        off_raw = await s.call_tool("bib_ask", {"query": "how to bake sourdough bread at home", "top_k": 3})
        off = structured(off_raw, "bib_ask off-topic", text_is_json=False)
        check(off["no_good_match"] is True, f"bib_ask off-topic: no_good_match is {off['no_good_match']}")
        check(text_of(off_raw).startswith("No good match"), "bib_ask off-topic: the text does not say so")

        # Trimming never adds tokens.
        trimmed = structured(
            await s.call_tool(
                "bib_ask",
                {"query": args.question, "top_k": 3, "trim": True, "trim_threshold": 0.3, "trim_window": 0},
            ),
            "bib_ask trim",
            text_is_json=False,
        )
        check(trimmed["trim"] is True, "bib_ask trim: trimming did not run")
        check(trimmed["tokens_in_context"] <= trimmed["tokens_before"], "bib_ask trim: more tokens after")
        summary["trim_tokens"] = [trimmed["tokens_before"], trimmed["tokens_in_context"]]

        # Filters apply: a path prefix that matches nothing returns nothing.
        none = structured(
            await s.call_tool("bib_ask", {"query": args.question, "filters": {"path": "no/such/dir/"}}),
            "bib_ask filter",
            text_is_json=False,
        )
        check(none["results"] == [], "bib_ask filter: results outside the path prefix")

        # Wrong argument type and unknown argument: invalid_params naming the field.
        summary["wrong_type_error"] = await expect_invalid_params(
            s, "bib_ask", {"query": args.question, "top_k": "five"}, "top_k"
        )
        await expect_invalid_params(s, "bib_ask", {"query": args.question, "colour": "red"}, "colour")
        await expect_invalid_params(s, "bib_pack", {"messages": [], "budget": -3}, "budget")

        # Register without a token: refused, nothing written.
        refused = await s.call_tool(
            "bib_register_doc", {"path": refused_path, "content": f"# Refused\n\nThe {unique} refused page.\n"}
        )
        check(refused.is_error, "bib_register_doc without token was not refused")
        err = (refused.structured_content or {}).get("error", {})
        check(err.get("code") == "unauthorized", f"refusal code is {err.get('code')!r}")
        # A wrong token is refused too.
        wrong = await s.call_tool(
            "bib_register_doc",
            {"path": refused_path, "content": "# Refused\n\nx\n", "token": "not-the-token-at-all"},
        )
        check(wrong.is_error, "bib_register_doc with a wrong token was not refused")
        idx = await s.call_tool(
            "bib_index_chunks", {"chunks": [{"node_id": 1, "chunk_index": 0, "content": "x"}]}
        )
        check(idx.is_error, "bib_index_chunks without token was not refused")
        after = structured(
            await s.call_tool("bib_ask", {"query": unique, "mode": "bm25"}), "bib_ask after refusal", text_is_json=False
        )
        check(all(r["path"] != refused_path for r in after["results"]), "refused document is searchable")

        # bib_pack: within budget, keeps the live question.
        history = [{"role": "user", "content": f"note {i}: the build cache lives in /var/cache/build-{i}"} for i in range(40)]
        history.append({"role": "user", "content": "where does the build cache live for note 7?"})
        packed = structured(await s.call_tool("bib_pack", {"messages": history, "budget": 120}), "bib_pack")
        check(packed["stats"]["output_tokens"] <= 120, f"bib_pack over budget: {packed['stats']}")
        check(any("note 7" in m["content"] for m in packed["messages"]), "bib_pack dropped the live question")
        summary["pack"] = packed["stats"]["output_tokens"]
        # The input format of `bib pack`: `ts` in epoch ms or RFC 3339; seconds are refused.
        timed = [{"role": "user", "content": "deploy on friday", "ts": "2026-08-07T12:00:00Z"},
                 {"role": "assistant", "content": "ok", "timestamp": 1786104060000},
                 {"role": "user", "content": "when do we deploy?"}]
        structured(await s.call_tool("bib_pack", {"messages": timed, "budget": 200}), "bib_pack timed")
        await expect_invalid_params(
            s, "bib_pack", {"messages": [{"role": "user", "content": "x", "ts": 1786104000}], "budget": 50},
            "messages[0]",
        )

        # bib_eval_retrieval on explicit questions (retrieval only).
        ev = await s.call_tool(
            "bib_eval_retrieval", {"questions": [args.question], "top_k": 3, "trim_threshold": 0.3, "trim_window": 1}
        )
        if ev.is_error:
            err = (ev.structured_content or {}).get("error", {})
            check(err.get("code") == "not_available", f"bib_eval_retrieval failed: {ev.content}")
            summary["eval"] = "not_available"
        else:
            report = structured(ev, "bib_eval_retrieval")
            check(len(json.dumps(report)) > 50, "bib_eval_retrieval: empty report")
            summary["eval"] = sorted(report.keys())
        await expect_invalid_params(s, "bib_eval_retrieval", {"top_k": "three"}, "top_k")

    # ── a session with credentials (header over HTTP, argument over stdio) ──────────
    async with connect(args, with_auth=True) as s:
        await s.initialize()
        token_arg = {"token": args.token} if args.transport == "stdio" else {}
        reg = structured(
            await s.call_tool(
                "bib_register_doc",
                {"path": registered_path, "front_matter": {"title": "Added page", "tags": ["e2e"]},
                 "body": f"# Added page\n\nThe {unique} widget is configured in added.toml.\n", **token_arg},
            ),
            "bib_register_doc",
        )
        check(reg["created"] is True and isinstance(reg["node_id"], int), f"bib_register_doc: {reg}")
        again = structured(
            await s.call_tool(
                "bib_register_doc",
                {"path": registered_path, "front_matter": {"title": "Added page", "tags": ["e2e"]},
                 "body": f"# Added page\n\nThe {unique} widget is configured in added.toml.\n", **token_arg},
            ),
            "bib_register_doc again",
        )
        check(again["created"] is False and again["node_id"] == reg["node_id"], "re-registering created a twin")
        node = reg["node_id"]
        chunks = [
            {"node_id": node, "chunk_index": 0, "content": f"The {unique} widget is configured in added.toml.",
             "heading_path": ["Added page"]},
            {"node_id": node, "chunk_index": 1, "content": "Restart the service after editing the file."},
            {"node_id": node, "chunk_index": 2, "content": "A third chunk that the prune removes."},
        ]
        m1 = structured(await s.call_tool("bib_index_chunks", {"chunks": chunks, **token_arg}), "bib_index_chunks")
        check((m1["chunks_created"], m1["errors"]) == (3, 0), f"bib_index_chunks: {m1}")
        m2 = structured(
            await s.call_tool(
                "bib_index_chunks",
                {"chunks": chunks[:2], "prune": [{"node_id": node, "keep_count": 2}], **token_arg},
            ),
            "bib_index_chunks again",
        )
        check(
            (m2["chunks_skipped"], m2["chunks_pruned"], m2["chunks_created"], m2["errors"]) == (2, 1, 0, 0),
            f"bib_index_chunks re-run: {m2}",
        )
        bad = structured(
            await s.call_tool(
                "bib_index_chunks",
                {"chunks": [{"node_id": 987654, "chunk_index": 0, "content": "orphan"}], **token_arg},
            ),
            "bib_index_chunks unknown node",
        )
        check(bad["errors"] == 1 and bad["chunks_created"] == 0, f"unknown node: {bad}")
        await expect_invalid_params(
            s, "bib_index_chunks", {"chunks": [{"node_id": "x", "chunk_index": 0, "content": "c"}], **token_arg},
            "chunks[0].node_id",
        )
        found = structured(
            await s.call_tool("bib_ask", {"query": f"{unique} widget", "top_k": 3}), "bib_ask new", text_is_json=False
        )
        check(found["results"] and found["results"][0]["path"] == registered_path,
              f"indexed chunk not found first: {[r['path'] for r in found['results']]}")

    summary["registered_path"] = registered_path
    summary["refused_path"] = refused_path
    return summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("transport", choices=["stdio", "http"])
    p.add_argument("--bib", help="path of the bib binary (stdio)")
    p.add_argument("--store", help="knowledge-base file (stdio)")
    p.add_argument("--cwd", default=None)
    p.add_argument("--url", help="MCP endpoint, e.g. http://127.0.0.1:8080/mcp (http)")
    p.add_argument("--token", required=True)
    p.add_argument("--question", required=True)
    p.add_argument("--expect-path", required=True)
    args = p.parse_args()
    if args.transport == "stdio" and not (args.bib and args.store):
        p.error("stdio needs --bib and --store")
    if args.transport == "http" and not args.url:
        p.error("http needs --url")
    try:
        summary = asyncio.run(asyncio.wait_for(run(args), timeout=300))
    except BaseException as e:  # noqa: BLE001 - report anything, including exception groups
        print(f"FAILED ({args.transport}): {type(e).__name__}: {e}", file=sys.stderr)

        def causes(err: BaseException, depth: int) -> None:
            for sub in getattr(err, "exceptions", []) or []:
                print(f"{'  ' * depth}caused by {type(sub).__name__}: {sub}", file=sys.stderr)
                causes(sub, depth + 1)

        causes(e, 1)
        return 1
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
