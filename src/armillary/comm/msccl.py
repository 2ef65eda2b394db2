"""A synthesized schedule as MSCCL algorithm XML (`<algo><gpu><tb><step>`, the format msccl-tools emits and
the MSCCL runtime loads), its schema check, and reading it back.

Layout: every GPU has one thread block per link it sends on (`send` = peer) and one per link it receives
on (`recv` = peer), all on channel 0; a thread block's steps run in the schedule's order. A step moves one
chunk (`cnt` 1) at offset = chunk index of the output buffer ("o"); a receive that reduces is `rrc`
(receive-reduce-copy). A send waits (`depid`, `deps`) for the last receive of its chunk on the same GPU;
that receive is marked `hasdep`. MSCCL steps carry one dependency: a reduce-scatter send waits for its
chunk's last partial sum, the earlier ones end before it in the synthesized schedule.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

import numpy as np

from armillary.comm.synthesis import Schedule
from armillary.specs.communication import Collective

_COLL = {Collective.ALL_GATHER: "allgather", Collective.REDUCE_SCATTER: "reduce_scatter",
         Collective.ALL_REDUCE: "allreduce"}
STEP_TYPES = ("s", "r", "rrc", "nop")
_ALGO = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace")
_STEP = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")


def to_xml(schedule: Schedule, name: str = "armillary-synthesized") -> str:
    """The schedule as MSCCL XML."""
    n = schedule.links.nodes
    order = np.argsort(schedule.start, kind="stable")
    # per gpu, per (direction, peer): steps as (chunk, type, peer of the receive it waits for, its step)
    tbs: dict[int, dict[tuple[str, int], list[tuple[int, str, int, int]]]] = defaultdict(dict)
    last_recv: dict[tuple[int, int], tuple[int, int]] = {}  # (gpu, chunk) -> (peer, step) of its last receive
    for k in order:
        u, v = int(schedule.src[k]), int(schedule.dst[k])
        c, reduce = int(schedule.chunk[k]), bool(schedule.reducing[k])
        dep_peer, dep_step = last_recv.get((u, c), (-1, -1))
        tbs[u].setdefault(("send", v), []).append((c, "s", dep_peer, dep_step))
        recv_steps = tbs[v].setdefault(("recv", u), [])
        recv_steps.append((c, "rrc" if reduce else "r", -1, -1))
        last_recv[(v, c)] = (u, len(recv_steps) - 1)
    root = ET.Element("algo", name=name, proto="Simple", nchannels="1", nchunksperloop=str(schedule.chunks),
                      ngpus=str(n), coll=_COLL[schedule.op], inplace="1")
    for g in range(n):
        gpu = ET.SubElement(root, "gpu", id=str(g), i_chunks=str(schedule.chunks), o_chunks=str(schedule.chunks),
                            s_chunks="0")
        keys = sorted(tbs[g])
        index = {key: i for i, key in enumerate(keys)}
        depended = {(index[("recv", peer)], step) for key in keys for _, _, peer, step in tbs[g][key] if peer >= 0}
        for key in keys:
            kind, peer = key
            tb = ET.SubElement(gpu, "tb", id=str(index[key]), send=str(peer if kind == "send" else -1),
                               recv=str(peer if kind == "recv" else -1), chan="0")
            for s, (c, typ, dep_peer, dep_step) in enumerate(tbs[g][key]):
                depid = index[("recv", dep_peer)] if dep_peer >= 0 else -1
                ET.SubElement(tb, "step", s=str(s), type=typ, srcbuf="o", srcoff=str(c), dstbuf="o", dstoff=str(c),
                              cnt="1", depid=str(depid), deps=str(dep_step),
                              hasdep="1" if (index[key], s) in depended else "0")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


def validate(xml: str) -> list[str]:
    """What is wrong with an MSCCL algorithm XML (empty: it passes): required attributes, ids, peers,
    step order and types, chunk offsets, dependencies that exist and are flagged, and every send matched by a
    receive of the same chunks in the same order on its peer."""
    errors: list[str] = []
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        return [f"not XML: {e}"]
    if root.tag != "algo":
        return [f"root element is <{root.tag}>, not <algo>"]
    errors += [f"<algo> lacks {a}" for a in _ALGO if a not in root.attrib]
    if errors:
        return errors
    ngpus, nchunks = int(root.get("ngpus", 0)), int(root.get("nchunksperloop", 0))
    gpus = root.findall("gpu")
    if sorted(int(g.get("id", -1)) for g in gpus) != list(range(ngpus)):
        errors.append(f"gpu ids are not 0..{ngpus - 1}")
    sends: dict[tuple[int, int], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[int]] = defaultdict(list)
    for g in gpus:
        gid = int(g.get("id", -1))
        tbs = g.findall("tb")
        steps = {int(tb.get("id", -1)): tb.findall("step") for tb in tbs}
        if sorted(steps) != list(range(len(tbs))):
            errors.append(f"gpu {gid}: tb ids are not 0..{len(tbs) - 1}")
        flagged = {(int(tb.get("id", -1)), int(st.get("s", -1))) for tb in tbs for st in tb.findall("step")
                   if st.get("hasdep") == "1"}
        for tb in tbs:
            tid, send, recv = int(tb.get("id", -1)), int(tb.get("send", -2)), int(tb.get("recv", -2))
            if not (-1 <= send < ngpus and -1 <= recv < ngpus) or send == gid or recv == gid:
                errors.append(f"gpu {gid} tb {tid}: bad peers send={send} recv={recv}")
            for i, st in enumerate(tb.findall("step")):
                missing = [a for a in _STEP if a not in st.attrib]
                if missing:
                    errors.append(f"gpu {gid} tb {tid} step {i}: lacks {missing}")
                    continue
                kind, off = st.get("type", ""), int(st.get("srcoff", -1))
                if int(st.get("s", -1)) != i:
                    errors.append(f"gpu {gid} tb {tid}: step {i} numbered {st.get('s')}")
                if kind not in STEP_TYPES:
                    errors.append(f"gpu {gid} tb {tid} step {i}: type {kind!r} not in {STEP_TYPES}")
                if not 0 <= off < nchunks:
                    errors.append(f"gpu {gid} tb {tid} step {i}: offset {off} outside 0..{nchunks - 1}")
                depid, deps = int(st.get("depid", -1)), int(st.get("deps", -1))
                if depid >= 0 and (depid not in steps or not 0 <= deps < len(steps[depid])):
                    errors.append(f"gpu {gid} tb {tid} step {i}: depends on missing step {depid}:{deps}")
                elif depid >= 0 and (depid, deps) not in flagged:
                    errors.append(f"gpu {gid} tb {tid} step {i}: step {depid}:{deps} it waits for lacks hasdep")
                if kind == "s":
                    sends[(gid, send)].append(off)
                elif kind in ("r", "rrc"):
                    recvs[(recv, gid)].append(off)
    for pair in set(sends) | set(recvs):
        if sends.get(pair, []) != recvs.get(pair, []):
            errors.append(f"sends {pair[0]} -> {pair[1]} do not match the receives there")
    return errors


def read_transfers(xml: str) -> list[tuple[int, int, int]]:
    """(src, dst, chunk) of every send, per link in step order, links in (src, dst) order."""
    root = ET.fromstring(xml)
    out: list[tuple[int, int, int]] = []
    for g in sorted(root.findall("gpu"), key=lambda e: int(e.get("id", 0))):
        for tb in sorted(g.findall("tb"), key=lambda e: int(e.get("send", -1))):
            peer = int(tb.get("send", -1))
            if peer >= 0:
                out += [(int(g.get("id", 0)), peer, int(st.get("srcoff", 0))) for st in tb.findall("step")
                        if st.get("type") == "s"]
    return out


def schedule_transfers(schedule: Schedule) -> list[tuple[int, int, int]]:
    """The same list from a schedule, for a round-trip check."""
    order = np.lexsort((schedule.start, schedule.dst, schedule.src))
    return [(int(schedule.src[k]), int(schedule.dst[k]), int(schedule.chunk[k])) for k in order]
