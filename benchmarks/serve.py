"""Throughput and latency of ``seqlab serve``, with predict batching off and on, and streaming speed against the
same generation in process.

Two ``seqlab serve`` subprocesses (fork + exec, on free ports of 127.0.0.1) are driven by asyncio clients (httpx),
each client sending its requests one after the other: one serves G2P and LM with batching on (--max-batch-size,
--batch-wait-ms), the other G2P with batching off (``--max-batch-size 1``).

Table 1: for 1, 8 and 32 concurrent clients, --requests ``POST /v1/predict`` of one word each on the g2p run (its
n-best: beam --nbest; client c's request r asks for word c + r of --words), batching off then on, --rounds times
taking turns (each row pools its rounds). Columns:
requests/s (all requests over the wall-clock time) and its ratio on/off, p50 and p95 latency in milliseconds, and
requests per ``System.predict`` call (the server's ``/healthz`` counters).

Table 2: for the same levels, --requests ``POST /v1/generate`` of --new-tokens tokens (greedy, so every request
does the same work; never batched) on the lm run, read to its ``done`` event: requests/s, p50 and p95 latency
until the last event, p50 time to first token (the first chunk with text) and tokens/s summed over clients.

Table 3: tokens/s of one client streaming, against ``System.generate`` of the same request in this process
(every chunk consumed), each the median of --repeats runs taking turns; the ratio is streaming
over in-process (target >= 0.9).

The servers run with --max-concurrency (default 4): requests beyond it wait. The processes share the machine's
cores, so the absolute numbers depend on its load; ratios are measured in one run, off and on taking turns.

    nice python benchmarks/serve.py --g2p /work/runs/pronouncer20k --lm /work/runs/lm
    python benchmarks/serve.py --g2p tests/fixtures/checkpoints/g2p_v0_1 \\
        --lm tests/fixtures/checkpoints/lm_gpt_9a192c4 --words cat,dog --requests 16 --new-tokens 16 --repeats 1
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import httpx

from seqlab.recipes import load_system
from seqlab.recipes.system import GenerationRequest

WORDS = "pronunciation,cat,thoroughly,seqlab,water,alphabet,knight,encyclopedia"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--g2p", type=Path, required=True, help="a g2p run directory")
    parser.add_argument("--lm", type=Path, required=True, help="an lm run directory (a GPT)")
    parser.add_argument("--words", default=WORDS, help="the words to predict, comma-separated")
    parser.add_argument("--prompt", default="The ", help="the prompt to continue")
    parser.add_argument("--requests", type=int, default=64, help="requests of each kind per concurrency level")
    parser.add_argument("--new-tokens", type=int, default=64, help="max_new_tokens of each generation")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each side of table 2")
    parser.add_argument("--max-concurrency", type=int, default=4, help="the server's --max-concurrency")
    parser.add_argument("--nbest", type=int, default=5, help="the servers' --nbest")
    parser.add_argument("--max-batch-size", type=int, default=32, help="--max-batch-size of the batching server")
    parser.add_argument("--batch-wait-ms", type=int, default=2, help="--batch-wait-ms of the batching server")
    parser.add_argument("--rounds", type=int, default=1, help="turns of off and on at each level of table 1")
    args = parser.parse_args()

    shared = ["--max-concurrency", str(args.max_concurrency), "--nbest", str(args.nbest)]
    batching = ["--max-batch-size", str(args.max_batch_size), "--batch-wait-ms", str(args.batch_wait_ms)]
    servers, urls = [], []
    try:
        for runs, settings in (([args.g2p], ["--max-batch-size", "1"]), ([args.g2p, args.lm], batching)):
            port = free_port()
            command = [sys.executable, "-m", "seqlab", "serve", *map(str, runs), "--port", str(port), *shared]
            servers.append(subprocess.Popen([*command, *settings]))
            urls.append(f"http://127.0.0.1:{port}")
        for url, server in zip(urls, servers, strict=True):
            wait_for(url, server)
        asyncio.run(measure(args, off=urls[0], on=urls[1]))
    finally:
        for server in servers:
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


async def measure(args: argparse.Namespace, *, off: str, on: str) -> None:
    g2p, lm = args.g2p.resolve().name, args.lm.resolve().name
    words = args.words.split(",")
    generation = {"model": lm, "prompt": args.prompt, "max_new_tokens": args.new_tokens, "do_sample": False}
    # idle connections are dropped before uvicorn closes them (its keep-alive is 5 s): while one server is measured
    # the other idles, and a reused connection that the server has just closed fails with ReadError
    limits = httpx.Limits(max_connections=64, keepalive_expiry=1)
    async with (
        httpx.AsyncClient(base_url=off, timeout=600, limits=limits) as unbatched,
        httpx.AsyncClient(base_url=on, timeout=600, limits=limits) as client,
    ):
        for server in (unbatched, client):  # warm up every model
            await predict_once(server, {"model": g2p, "inputs": words[:1]})
        await generate_once(client, generation)
        predicts, generations = [], []
        for clients in (1, 8, 32):
            body = {"model": g2p, "inputs": words[:1]}
            rounds = [
                [await predict_level(server, clients, args.requests, body, words) for server in (unbatched, client)]
                for _ in range(args.rounds)
            ]  # off and on taking turns
            predicts += [functools.reduce(Level.merged, column) for column in zip(*rounds, strict=True)]
            generations.append(await level(clients, args.requests, generate_once, client, generation))
        print(f"Table 1: seqlab serve, g2p predict of one word, batching off (--max-batch-size 1) and on "
              f"(--max-batch-size {args.max_batch_size} --batch-wait-ms {args.batch_wait_ms})")  # fmt: skip
        print(f"{'batching':<10}{'clients':>8}{'req/s':>9}{'on/off':>8}{'p50 ms':>9}{'p95 ms':>9}{'req/call':>10}")
        for row_off, row_on in zip(predicts[::2], predicts[1::2], strict=True):
            for name, row in (("off", row_off), ("on", row_on)):
                ratio = row.rate / row_off.rate
                print(f"{name:<10}{row.clients:>8}{row.rate:>9.1f}{ratio:>8.2f}{1000 * row.p50:>9.1f}"
                      f"{1000 * row.p95:>9.1f}{len(row.latencies) / row.calls:>10.1f}")  # fmt: skip
        print("\nTable 2: seqlab serve, gpt generate (greedy, never batched)")
        print(f"{'kind':<14}{'clients':>8}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'TTFT ms':>9}{'tok/s':>9}")
        for row in generations:
            ttft = 1000 * statistics.median(row.firsts)
            tokens = len(row.latencies) * args.new_tokens / row.elapsed
            print(f"{'gpt generate':<14}{row.clients:>8}{row.rate:>9.1f}{1000 * row.p50:>9.1f}"
                  f"{1000 * row.p95:>9.1f}{ttft:>9.1f}{tokens:>9.0f}")  # fmt: skip

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
    print(f"\nTable 3: one client, {args.new_tokens} tokens, median of {args.repeats}")
    print(f"{'path':<28}{'tok/s':>10}{'ratio':>8}")
    print(f"{'System.generate in process':<28}{direct_rate:>10.1f}{1.0:>8.2f}")
    print(f"{'POST /v1/generate (SSE)':<28}{stream_rate:>10.1f}{stream_rate / direct_rate:>8.2f}")


async def predict_once(client: httpx.AsyncClient, body: dict) -> tuple[float, float | None]:
    started = time.perf_counter()
    response = await client.post("/v1/predict", json=body)
    response.raise_for_status()
    return time.perf_counter() - started, None


async def predict_level(client: httpx.AsyncClient, clients: int, total: int, body: dict, words: list[str]) -> Level:
    """``total`` predicts from ``clients`` clients, with the System.predict calls the server made for them."""
    before = (await client.get("/healthz")).json()["predict_calls"]
    row = await level(clients, total, predict_once, client, body, words)
    return row._replace(calls=(await client.get("/healthz")).json()["predict_calls"] - before)


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


class Level(NamedTuple):
    """What requests from ``clients`` clients measured: each one's latency and time to first token (s), the
    seconds they took in all, and (predict) the System.predict calls that answered them."""

    clients: int
    latencies: list[float]
    firsts: list[float]
    elapsed: float
    calls: int = 0

    @property
    def rate(self) -> float:
        """Requests per second."""
        return len(self.latencies) / self.elapsed

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def p95(self) -> float:
        return statistics.quantiles(self.latencies, n=20, method="inclusive")[18]

    def merged(self, other: Level) -> Level:
        """Both measurements as one (another round of the same level)."""
        return Level(self.clients, self.latencies + other.latencies, self.firsts + other.firsts,
                     self.elapsed + other.elapsed, self.calls + other.calls)  # fmt: skip


async def level(clients, total, once, client, body, words=None) -> Level:
    """``total`` requests from ``clients`` clients, each sending its requests one after the other (with
    ``words``, client c's request r predicts word c + r)."""
    latencies: list[float] = []
    firsts: list[float] = []
    per_client = [total // clients + (i < total % clients) for i in range(clients)]

    async def run_client(index: int, count: int) -> None:
        for request in range(count):
            sent = body if words is None else {**body, "inputs": [words[(index + request) % len(words)]]}
            latency, first = await once(client, sent)
            latencies.append(latency)
            if first is not None:
                firsts.append(first)

    started = time.perf_counter()
    await asyncio.gather(*(run_client(i, n) for i, n in enumerate(per_client) if n))
    return Level(clients, latencies, firsts, time.perf_counter() - started)


if __name__ == "__main__":
    main()
