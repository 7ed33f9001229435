"""Launchers that run inside a task and start its training processes.

``python -m det_hub.launch.torch_distributed [--] python3 train.py`` starts one
``torch.distributed`` worker per slot; ``python -m det_hub.launch.horovod [--] python3 train.py``
does the same through ``horovodrun``, and ``python -m det_hub.launch.deepspeed`` for DeepSpeed
scripts. All take Determined's launcher command line, so an
experiment config's ``entrypoint`` needs only ``determined`` changed to ``det_hub``.
"""
