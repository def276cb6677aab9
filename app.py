"""The visualiser: a Gradio app that shows, step by step, how a Transformer works.

    python app.py [--host 127.0.0.1] [--port 7860] [--device auto|cpu|cuda|mps] [--share]
                  [--model PATH_OR_ID ...] [--dtype auto|float32|bfloat16|float16]
                  [--allow-download] [--trusted-proxy ADDR ...]
                  [--workers N [--redis URL] [--no-balancer]]

This file is the entry point only: arguments, building the demo, launching it. The interface
lives in ``ui/`` (one module per tab), computation in ``transformer/`` and figures in
``transformer.figures`` (pure plotly functions). ``--workers N`` runs N such processes behind
HAProxy (``ui/serving/cluster.py``, ``deploy/README.md``).
"""

from __future__ import annotations

import argparse
import logging
import os

from transformer.core.device import DEVICE_CHOICES, DTYPE_CHOICES
from transformer.pretrained.loading import SUPPORTED
from ui import build_demo, launch_options, preload_models
from ui.serving import clients, cluster
from ui.serving.memory import return_memory_when_idle
from ui.serving.space import install_shipped_models

__all__ = ["build_demo", "launch_options", "main", "preload_models"]


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, build the app and serve it (loopback, no share link, by default)."""
    parser = argparse.ArgumentParser(description="The Transformer visualiser.")
    # A Hugging Face Space sets GRADIO_SERVER_NAME=0.0.0.0 for its proxy: an explicit host
    # would override it, so it is the default when set (loopback otherwise).
    parser.add_argument(
        "--host",
        default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        help="address to bind (default $GRADIO_SERVER_NAME, else 127.0.0.1)",
    )
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    parser.add_argument(
        "--device",
        default="auto",
        help=f"{', '.join(DEVICE_CHOICES)} or cuda:N: where models run (default auto: the GPU if there is one; a --model larger than "
        "it is spread over the GPUs and then the CPU, with accelerate installed)",
    )
    parser.add_argument("--share", action="store_true", help="make a public gradio.live link")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="PATH_OR_ID",
        help="add a Hugging Face model folder, a Llama-family .gguf file, or a hub id (e.g. "
        "gpt2) found in the local Hugging Face cache (repeatable); the families read: " + SUPPORTED,
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=DTYPE_CHOICES,
        help="what --model weights are kept in (default auto: float32 on a CPU, the "
        "checkpoint's own, often bfloat16, on a GPU)",
    )
    parser.add_argument(
        "--allow-download",
        action="store_true",
        help="let --model download a hub id that is not in the local cache (safetensors only)",
    )
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDR",
        help="a proxy in front of the app (an address or network, repeatable; default "
        f"${clients.TRUSTED_PROXIES_ENV}): only its X-Forwarded-For names a visitor's address",
    )
    cluster.add_arguments(parser)
    args = parser.parse_args(argv)
    cluster.check_arguments(parser, args)
    if args.trusted_proxy:
        try:
            clients.parse_proxies(",".join(args.trusted_proxy))
        except ValueError as error:
            parser.error(f"--trusted-proxy: {error}")
        # Read by this process's server and inherited by the workers of --workers N.
        os.environ[clients.TRUSTED_PROXIES_ENV] = ",".join(args.trusted_proxy)
    logging.basicConfig(level=logging.INFO)
    if cluster.launches(args):  # the launcher: N of this process behind HAProxy
        raise SystemExit(cluster.serve(args))
    worker = cluster.worker_name()  # set when the launcher started this process
    if worker:
        cluster.limit_threads()
    return_memory_when_idle()
    # A Space installs requirements.txt only: the shipped models' packages come here (logged);
    # a failure leaves the bundled models serving and says why in the page. (A worker's
    # launcher did it once for all.)
    not_installed = {} if worker else install_shipped_models()
    # Pretrained weights are read once the page is served: read during start-up, they would
    # compete with it for the interpreter (about +5 s on two cores).
    demo = build_demo(args.device, args.model, args.allow_download, preload=False, dtype=args.dtype)
    if not_installed:  # the page's status line names each missing model and why
        demo.model_registry.pretrained_errors.update(not_installed)  # type: ignore[attr-defined]
    options = launch_options()
    demo.launch(
        server_name=args.host,
        server_port=args.port,
        share=args.share,
        prevent_thread_lock=True,
        **(cluster.worker_launch_options(options) if worker else options),
    )
    preload_models(demo)
    demo.block_thread()


if __name__ == "__main__":
    main()
