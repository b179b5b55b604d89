"""Throughput and latency of ``seqlab serve``, and streaming speed against the same generation in process.

A ``seqlab serve G2P LM`` subprocess (fork + exec, on a free port of 127.0.0.1) is driven by asyncio clients
(httpx), each sending its requests one after the other:

Table 1: for 1, 8 and 32 concurrent clients, --requests requests in all of each kind: ``POST /v1/predict`` of
one word on the g2p run (its n-best: beam --nbest), and ``POST /v1/generate`` of --new-tokens tokens (greedy, so
every request does the same work) on the lm run, read to its ``done`` event. Columns: requests/s (all requests
over the wall-clock time), p50 and p95 latency in milliseconds (a generation's until its last event), and for
generation the p50 time to first token (the first chunk with text) and tokens/s summed over clients.

Table 2: tokens/s of one client streaming, against ``System.generate`` of the same request in this process
(every chunk consumed), each the median of --repeats runs taking turns; the ratio is streaming
over in-process (target >= 0.9).

The server runs with --max-concurrency (default 4): requests beyond it wait. Both processes share the machine's
cores, so the absolute numbers depend on its load; the ratio is measured in one run.

    nice python benchmarks/serve.py --g2p /work/runs/g2p --lm /work/runs/lm
    python benchmarks/serve.py --g2p tests/fixtures/checkpoints/g2p_v0_1 \\
        --lm tests/fixtures/checkpoints/lm_gpt_9a192c4 --word cat --requests 16 --new-tokens 16 --repeats 1
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from seqlab.recipes import load_system
from seqlab.recipes.system import GenerationRequest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--g2p", type=Path, required=True, help="a g2p run directory")
    parser.add_argument("--lm", type=Path, required=True, help="an lm run directory (a GPT)")
    parser.add_argument("--word", default="pronunciation", help="the word to predict")
    parser.add_argument("--prompt", default="The ", help="the prompt to continue")
    parser.add_argument("--requests", type=int, default=64, help="requests of each kind per concurrency level")
    parser.add_argument("--new-tokens", type=int, default=64, help="max_new_tokens of each generation")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each side of table 2")
    parser.add_argument("--max-concurrency", type=int, default=4, help="the server's --max-concurrency")
    parser.add_argument("--nbest", type=int, default=5, help="the server's --nbest")
    args = parser.parse_args()

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "seqlab", "serve", str(args.g2p), str(args.lm), "--port", str(port),
         "--max-concurrency", str(args.max_concurrency), "--nbest", str(args.nbest)],
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(url, server)
        asyncio.run(measure(args, url))
    finally:
        server.terminate()
        server.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(url: str, server: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"seqlab serve exited with {server.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    raise SystemExit("seqlab serve did not answer in time")


async def measure(args: argparse.Namespace, url: str) -> None:
    g2p, lm = args.g2p.resolve().name, args.lm.resolve().name
    generation = {"model": lm, "prompt": args.prompt, "max_new_tokens": args.new_tokens, "do_sample": False}
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        await predict_once(client, {"model": g2p, "inputs": [args.word]})  # warm up both models
        await generate_once(client, generation)
        rows = []
        for clients in (1, 8, 32):
            rows.append(await level("g2p predict", clients, args.requests, predict_once, client,
                                    {"model": g2p, "inputs": [args.word]}, args.new_tokens))  # fmt: skip
            rows.append(await level("gpt generate", clients, args.requests, generate_once, client, generation,
                                    args.new_tokens))  # fmt: skip
        print("Table 1: seqlab serve, requests from concurrent clients")
        print(f"{'kind':<14}{'clients':>8}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'TTFT ms':>9}{'tok/s':>9}")
        for row in rows:
            print(row)

        system = load_system(args.lm)
        request = GenerationRequest(**{k: v for k, v in generation.items() if k != "model"})
        collections.deque(system.generate(request), maxlen=0)  # warm up, as the server was
        streamed, direct = [], []
        for _ in range(args.repeats):  # taking turns, so a change of load falls on both
            started = time.perf_counter()
            await generate_once(client, generation)
            streamed.append(time.perf_counter() - started)
            started = time.perf_counter()
            collections.deque(system.generate(request), maxlen=0)  # every chunk consumed, nothing kept
            direct.append(time.perf_counter() - started)
    stream_rate = args.new_tokens / statistics.median(streamed)
    direct_rate = args.new_tokens / statistics.median(direct)
    print(f"\nTable 2: one client, {args.new_tokens} tokens, median of {args.repeats}")
    print(f"{'path':<28}{'tok/s':>10}{'ratio':>8}")
    print(f"{'System.generate in process':<28}{direct_rate:>10.1f}{1.0:>8.2f}")
    print(f"{'POST /v1/generate (SSE)':<28}{stream_rate:>10.1f}{stream_rate / direct_rate:>8.2f}")


async def predict_once(client: httpx.AsyncClient, body: dict) -> tuple[float, float | None]:
    started = time.perf_counter()
    response = await client.post("/v1/predict", json=body)
    response.raise_for_status()
    return time.perf_counter() - started, None


async def generate_once(client: httpx.AsyncClient, body: dict) -> tuple[float, float | None]:
    """Seconds to the ``done`` event, and to the first chunk with text."""
    started = time.perf_counter()
    first = None
    async with client.stream("POST", "/v1/generate", json=body) as response:
        response.raise_for_status()
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: ") and event == "error":
                raise RuntimeError(line)
            elif line.startswith("data: ") and event == "chunk" and first is None:
                first = time.perf_counter() - started if json.loads(line.removeprefix("data: "))["text"] else None
    return time.perf_counter() - started, first


async def level(kind, clients, total, once, client, body, new_tokens) -> str:
    """One row of table 1: ``total`` requests from ``clients`` clients."""
    latencies: list[float] = []
    firsts: list[float] = []
    per_client = [total // clients + (i < total % clients) for i in range(clients)]

    async def run_client(count: int) -> None:
        for _ in range(count):
            latency, first = await once(client, body)
            latencies.append(latency)
            if first is not None:
                firsts.append(first)

    started = time.perf_counter()
    await asyncio.gather(*(run_client(n) for n in per_client if n))
    elapsed = time.perf_counter() - started
    quantiles = statistics.quantiles(latencies, n=20, method="inclusive")
    p50, p95 = statistics.median(latencies), quantiles[18]
    ttft = f"{1000 * statistics.median(firsts):>9.1f}" if firsts else f"{'':>9}"
    tokens = f"{len(latencies) * new_tokens / elapsed:>9.0f}" if firsts else f"{'':>9}"
    return f"{kind:<14}{clients:>8}{len(latencies) / elapsed:>9.1f}{1000 * p50:>9.1f}{1000 * p95:>9.1f}{ttft}{tokens}"


if __name__ == "__main__":
    main()
