"""Runs llama.cpp's own HTTP server in-process (PyPI xllamacpp) until SIGTERM/SIGINT.

    python llamacpp_server.py MODEL.gguf PORT [CHAT_TEMPLATE_FILE | --embeddings]

Listens on 127.0.0.1:PORT with 4 slots of 2048 tokens each (8192 in all), one
compute thread, and /metrics enabled. With --embeddings it serves /v1/embeddings
(mean pooling) instead of generation. `.ci/llamacpp.sh` installs, starts and stops it.
"""

import signal
import sys
import threading

import xllamacpp


def main() -> None:
    model, port = sys.argv[1], int(sys.argv[2])
    params = xllamacpp.CommonParams()
    params.model.path = model
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_parallel = 4
    params.n_ctx = 8192
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.endpoint_metrics = True
    if len(sys.argv) > 3 and sys.argv[3] == "--embeddings":
        params.embedding = True
        params.pooling_type = xllamacpp.llama_pooling_type.LLAMA_POOLING_TYPE_MEAN
    elif len(sys.argv) > 3:
        with open(sys.argv[3], encoding="utf-8") as f:
            params.chat_template = f.read()
        params.use_jinja = True
    server = xllamacpp.Server(params)
    print(f"llama.cpp server on {server.listening_address}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    del server


if __name__ == "__main__":
    main()
