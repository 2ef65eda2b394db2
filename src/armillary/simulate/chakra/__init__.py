"""Chakra execution traces (the format ASTRA-sim reads): write a task graph, read one back or from other tools."""

from armillary.simulate.chakra.astra_sim import SendCost, astra_sim_problems, astra_sim_send_ns
from armillary.simulate.chakra.schema import CollectiveCommType, NodeType
from armillary.simulate.chakra.trace import read_chakra, write_chakra

__all__ = ["CollectiveCommType", "NodeType", "SendCost", "astra_sim_problems", "astra_sim_send_ns", "read_chakra",
           "write_chakra"]
