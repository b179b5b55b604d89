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

Table 3: one client streaming ``POST /v1/generate`` of --new-tokens tokens (greedy), against ``System.generate``
of the same request in this process, --repeats runs of each taking turns (medians). Both sides are timed alike:
from the request (the call) to the first chunk with text (TTFT) and to the end of the stream (the ``done`` event;
the generator's end), over the same tokens (the chunks with text, counted on both sides; the streamed text must
equal the in-process text). Columns: TTFT in ms, tokens/s from the request to the end, and tokens/s while
streaming (from the first token to the end), each with its ratio streaming / in-process (target >= 0.9). The
client is a plain blocking ``http.client`` connection that splits the stream into events and parses none of them
while timing (httpx's async client spent about as much CPU per token as the server's event loop), so the client is
not what is measured.

The servers run with --max-concurrency (default 4): requests beyond it wait, and with --server-threads torch threads
(their --threads; default: torch's). The processes share the machine's cores, so the absolute numbers depend on its
load (printed with table 3); ratios are measured in one run, off and on taking turns. --tables picks the tables to run
(table 3 alone needs no --g2p).

    nice python benchmarks/serve.py --g2p /work/runs/pronouncer20k --lm /work/runs/lm
    nice python benchmarks/serve.py --lm /work/runs/lm --tables 3 --repeats 21
    python benchmarks/serve.py --g2p tests/fixtures/checkpoints/g2p_v0_1 \\
        --lm tests/fixtures/checkpoints/lm_gpt_9a192c4 --words cat,dog --requests 16 --new-tokens 16 --repeats 1
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import http.client
import json
import os
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
    parser.add_argument("--g2p", type=Path, help="a g2p run directory (tables 1 and 2)")
    parser.add_argument("--lm", type=Path, required=True, help="an lm run directory (a GPT)")
    parser.add_argument("--words", default=WORDS, help="the words to predict, comma-separated")
    parser.add_argument("--prompt", default="The ", help="the prompt to continue")
    parser.add_argument("--requests", type=int, default=64, help="requests of each kind per concurrency level")
    parser.add_argument("--new-tokens", type=int, default=64, help="max_new_tokens of each generation")
    parser.add_argument("--repeats", type=int, default=9, help="runs of each side of table 3")
    parser.add_argument("--max-concurrency", type=int, default=4, help="the server's --max-concurrency")
    parser.add_argument("--nbest", type=int, default=5, help="the servers' --nbest")
    parser.add_argument("--max-batch-size", type=int, default=32, help="--max-batch-size of the batching server")
    parser.add_argument("--batch-wait-ms", type=int, default=2, help="--batch-wait-ms of the batching server")
    parser.add_argument("--rounds", type=int, default=1, help="turns of off and on at each level of table 1")
    parser.add_argument("--server-threads", type=int, help="the servers' --threads (default: torch's)")
    parser.add_argument("--tables", default="1,2,3", help="the tables to run, comma-separated (default: 1,2,3)")
    args = parser.parse_args()
    args.tables = set(args.tables.split(","))
    if not args.tables or not args.tables <= {"1", "2", "3"}:
        parser.error(f"--tables: expected some of 1,2,3, got {','.join(sorted(args.tables))}")
    if args.g2p is None and args.tables & {"1", "2"}:
        parser.error("--g2p is needed for tables 1 and 2")

    shared = ["--max-concurrency", str(args.max_concurrency), "--nbest", str(args.nbest)]
    if args.server_threads is not None:
        shared += ["--threads", str(args.server_threads)]
    batching = ["--max-batch-size", str(args.max_batch_size), "--batch-wait-ms", str(args.batch_wait_ms)]
    served = [([args.g2p], ["--max-batch-size", "1"])] if "1" in args.tables else []
    served.append(([args.g2p, args.lm] if args.g2p else [args.lm], batching))
    servers, urls = [], []
    try:
        for runs, settings in served:
            port = free_port()
            command = [sys.executable, "-m", "seqlab", "serve", *map(str, runs), "--port", str(port), *shared]
            servers.append(subprocess.Popen([*command, *settings]))
            urls.append(f"http://127.0.0.1:{port}")
        for url, server in zip(urls, servers, strict=True):
            wait_for(url, server)
        if args.tables & {"1", "2"}:
            asyncio.run(measure(args, off=urls[0], on=urls[-1]))
        if "3" in args.tables:
            streaming_table(args, urls[-1])
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
    """Tables 1 and 2 (as --tables asks) against the servers without (``off``) and with (``on``) batching."""
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
        for server in (unbatched, client) if "1" in args.tables else ():  # warm up every model
            await predict_once(server, {"model": g2p, "inputs": words[:1]})
        await generate_once(client, generation)
        predicts, generations = [], []
        for clients in (1, 8, 32):
            body = {"model": g2p, "inputs": words[:1]}
            rounds = [
                [await predict_level(server, clients, args.requests, body, words) for server in (unbatched, client)]
                for _ in range(args.rounds if "1" in args.tables else 0)
            ]  # off and on taking turns
            predicts += [functools.reduce(Level.merged, column) for column in zip(*rounds, strict=True)]
            if "2" in args.tables:
                generations.append(await level(clients, args.requests, generate_once, client, generation))
    if predicts:
        print(f"Table 1: seqlab serve, g2p predict of one word, batching off (--max-batch-size 1) and on "
              f"(--max-batch-size {args.max_batch_size} --batch-wait-ms {args.batch_wait_ms})")  # fmt: skip
        print(f"{'batching':<10}{'clients':>8}{'req/s':>9}{'on/off':>8}{'p50 ms':>9}{'p95 ms':>9}{'req/call':>10}")
        for row_off, row_on in zip(predicts[::2], predicts[1::2], strict=True):
            for name, row in (("off", row_off), ("on", row_on)):
                ratio = row.rate / row_off.rate
                print(f"{name:<10}{row.clients:>8}{row.rate:>9.1f}{ratio:>8.2f}{1000 * row.p50:>9.1f}"
                      f"{1000 * row.p95:>9.1f}{len(row.latencies) / row.calls:>10.1f}")  # fmt: skip
    if generations:
        print("\nTable 2: seqlab serve, gpt generate (greedy, never batched)")
        print(f"{'kind':<14}{'clients':>8}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'TTFT ms':>9}{'tok/s':>9}")
        for row in generations:
            ttft = 1000 * statistics.median(row.firsts)
            tokens = len(row.latencies) * args.new_tokens / row.elapsed
            print(f"{'gpt generate':<14}{row.clients:>8}{row.rate:>9.1f}{1000 * row.p50:>9.1f}"
                  f"{1000 * row.p95:>9.1f}{ttft:>9.1f}{tokens:>9.0f}")  # fmt: skip


class Stream(NamedTuple):
    """One generation as its consumer saw it: seconds from the request to the first chunk with text and to the
    end, the chunks with text, and the text."""

    first: float
    end: float
    tokens: int
    text: str

    @property
    def rate(self) -> float:
        """Tokens per second from the request to the end."""
        return self.tokens / self.end

    @property
    def streaming_rate(self) -> float:
        """Tokens per second from the first token to the end (the tokens after the first)."""
        return (self.tokens - 1) / (self.end - self.first)


def streaming_table(args: argparse.Namespace, url: str) -> None:
    """Table 3: one client streaming from ``url`` against ``System.generate`` in this process, taking turns."""
    body = {"model": args.lm.resolve().name, "prompt": args.prompt, "max_new_tokens": args.new_tokens,
            "do_sample": False}  # fmt: skip
    system = load_system(args.lm)
    request = GenerationRequest(**{k: v for k, v in body.items() if k != "model"})
    stream_once(url, body)  # warm up both sides
    generate_in_process(system, request)
    load = os.getloadavg()[0]
    streamed, direct = [], []
    for _ in range(args.repeats):  # taking turns, so a change of load falls on both
        streamed.append(stream_once(url, body))
        direct.append(generate_in_process(system, request))
    if {(s.tokens, s.text) for s in streamed + direct} != {(direct[0].tokens, direct[0].text)}:
        raise SystemExit("table 3: the streamed generations differ from the in-process ones")
    print(f"\nTable 3: one client, {direct[0].tokens} tokens (greedy), median of {args.repeats} each, taking turns; "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
    print(f"{'path':<28}{'TTFT ms':>9}{'tok/s':>8}{'ratio':>7}{'tok/s streaming':>17}{'ratio':>7}")
    reference = None
    for name, rows in (("System.generate in process", direct), ("POST /v1/generate (SSE)", streamed)):
        row = (1000 * statistics.median(r.first for r in rows), statistics.median(r.rate for r in rows),
               statistics.median(r.streaming_rate for r in rows))  # fmt: skip
        reference = reference or row
        print(f"{name:<28}{row[0]:>9.1f}{row[1]:>8.1f}{row[1] / reference[1]:>7.2f}{row[2]:>17.1f}"
              f"{row[2] / reference[2]:>7.2f}")  # fmt: skip
    print("same tokens on both sides: yes")


def generate_in_process(system, request: GenerationRequest) -> Stream:
    """``system.generate(request)`` consumed chunk by chunk, timed as ``stream_once`` times a stream."""
    started = time.perf_counter()
    first, tokens, texts = None, 0, []
    for chunk in system.generate(request):
        if chunk.text:
            tokens += 1
            first = first or time.perf_counter() - started
        texts.append(chunk.text)
    return Stream(first, time.perf_counter() - started, tokens, "".join(texts))


def stream_once(url: str, body: dict) -> Stream:
    """One ``POST /v1/generate`` read to its ``done`` event over a blocking connection, opened before the clock
    starts. While timing, the stream is only split into events (a chunk's text is empty exactly when its JSON
    holds ``"text": ""``); the events are parsed afterwards."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=600)
    try:
        connection.connect()  # as a kept-alive connection would be
        started = time.perf_counter()
        connection.request("POST", "/v1/generate", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            raise SystemExit(f"POST /v1/generate: {response.status} {response.read().decode()}")
        first, tokens, events, pending = None, 0, [], b""
        while not events or not events[-1].startswith((b"event: done", b"event: error")):
            data = response.read1(65536)
            if not data:
                raise SystemExit("the stream ended before its done event")
            *complete, pending = (pending + data).split(b"\n\n")
            for event in complete:
                if event.startswith(b"event: chunk") and b'"text": ""' not in event:
                    tokens += 1
                    first = first or time.perf_counter() - started
            events += complete
        end = time.perf_counter() - started
    finally:
        connection.close()
    texts = []
    for event in events:
        name, data = event.decode().split("\n")
        if name == "event: error":
            raise SystemExit(f"POST /v1/generate: {data}")
        texts.append(json.loads(data.removeprefix("data: ")).get("text", ""))
    return Stream(first, end, tokens, "".join(texts))


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
