"""Drives `ahpty mcp` over stdio with the Python `mcp` client and checks its replies.

Usage: drive.py AHPTY_BINARY SOCKET_PATH SCENARIO. Exits 0 when every check holds; prints
what failed otherwise. Scenarios: exit_codes, background, list_second_session, concurrent.
"""
import asyncio
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def server(binary, socket):
    return StdioServerParameters(command=binary, args=["mcp", "--no-start", "--url", "unix:" + socket])


async def call(s, tool, args):
    r = await s.call_tool(tool, args)
    return r, (r.structured_content or {})


def check(cond, what):
    if not cond:
        print("FAILED:", what, flush=True)
        sys.exit(1)


async def exit_codes(s, _b, _p):
    tools = {t.name for t in (await s.list_tools()).tools}
    check({"run", "wait", "send", "stop", "list"} <= tools, f"tools {tools}")
    for cmd, code in [("true", 0), ("(exit 3)", 3), ("echo hello-$((6*7))", 0)]:
        r, sc = await call(s, "run", {"command": cmd, "wait_s": 20})
        check(not r.is_error, f"{cmd}: {r.content}")
        check(sc.get("status") == "exited" and sc.get("exit_code") == code, f"{cmd}: {sc}")
    check("hello-42" in sc["output"], f"output {sc['output']!r}")
    r, sc = await call(s, "run", {"command": "printf '10%%\\r50%%\\r100%%\\n'", "wait_s": 20})
    check(sc.get("output", "").strip() == "100%", f"progress bar {sc.get('output')!r}")
    r, sc = await call(s, "run", {"command": "sleep 120", "wait_s": 1})
    check(sc.get("status") == "running", f"sleep: {sc}")
    term = str(sc["id"])
    r, sc = await call(s, "stop", {"terminal": term})
    check(sc.get("status") == "exited" and sc.get("exit_code") == 130, f"stop: {sc}")
    r, sc = await call(s, "run", {"command": "seq 1 100000", "wait_s": 30, "max_bytes": 2000})
    om = sc.get("omitted", {})
    kept = [l for l in sc["output"].splitlines() if l.isdigit()]
    check(len(sc["output"]) <= 2200 and om.get("lines", 0) + len(kept) == 100000, f"cut: {om} {len(kept)}")
    r, _ = await call(s, "wait", {"terminal": "no-such-terminal"})
    check(r.is_error, "unknown terminal is an error")


async def list_second_session(s, binary, socket):
    r, sc = await call(s, "run", {"command": "sleep 30", "name": "bg-job", "wait_s": 1})
    check(sc.get("status") == "running", f"bg: {sc}")
    async with stdio_client(server(binary, socket)) as (rd, wr):
        async with ClientSession(rd, wr) as s2:
            await s2.initialize()
            r, sc2 = await call(s2, "list", {})
            names = [t["terminal"] for t in sc2.get("terminals", [])]
            check("bg-job" in names, f"list from a second session: {names}")


async def concurrent(s, _b, _p):
    async def one(i):
        return await call(s, "run", {"command": f"(exit {i})", "name": f"c{i}", "wait_s": 30})
    results = await asyncio.gather(*(one(i) for i in range(10)))
    codes = sorted(sc.get("exit_code") for _, sc in results)
    check(codes == list(range(10)), f"ten at once: {codes}")


async def main():
    binary, socket, scenario = sys.argv[1:4]
    async with stdio_client(server(binary, socket)) as (rd, wr):
        async with ClientSession(rd, wr) as s:
            await s.initialize()
            await globals()[scenario](s, binary, socket)
    print("ok", flush=True)


asyncio.run(main())
