"""Probe: how cuBLAS's 128 x 128 kernel in CTA pairs moves 40 % fewer L2 sectors than ours at the same tile count.

ncu at 1024 x 2048 x 16384 (`nvidia_h100_80gb_hbm3/probes/ncu_k_slope_1024x2048x16384_9aba2fd.txt`): our `128
balanced cluster2` (128 CTAs in pairs sharing B) 25.8 M L2 sectors, what 128 tiles each loading its A and half of its
pair's B read (1024 tiles' worth of 16 KiB K-blocks: 768 MiB); cuBLAS's `nvjet_sm90_tst_128x128_64x6_2x1` (128 CTAs in
pairs) 15.5 M at the same 100.7 MB from DRAM, less than any sharing of one operand per pair allows. The L2's
sectors split by where they come from and go (the SMs' TMA reads, the fabric between the L2's two halves, hits and
misses), the L1's sectors from the crossbar (a multicast delivers to every CTA of the cluster), and ncu's memory
tables, for both kernels at 1024 x 2048 x 4096.

    python gemm_l2_sectors_probe.py OUT_DIR   (its report: ncu_l2_sectors_<commit>.txt)"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from workbook import ncu  # noqa: E402

METRICS = (
    "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "dram__bytes_read.sum",
    "lts__t_sectors.sum", "lts__t_requests.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_requests_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum", "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum",
    "lts__t_sectors_srcunit_ltcfabric.sum", "lts__t_sectors_srcnode_gpc.sum",
    "l1tex__m_xbar2l1tex_read_sectors.sum", "l1tex__m_xbar2l1tex_read_bytes.sum",
    "smsp__inst_executed.sum", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
)


def main(out_dir: str) -> None:
    commit = os.environ.get("WORKBOOK_COMMIT", "local")
    out = Path(out_dir) / f"ncu_l2_sectors_{commit}.txt"
    tool = ROOT / "tools" / "ncu_gemm_steps.py"
    ncu.run_child(tool, ["--inside", "--shape", "1024x2048x4096", "--candidates", "128 balanced cluster2"], METRICS,
                  out, ncu_args=["--section", "MemoryWorkloadAnalysis_Tables"],
                  header=f"# ncu --clock-control none --profile-from-start off --metrics {','.join(METRICS)} "
                         "--section MemoryWorkloadAnalysis_Tables ...\n")
    print(out.read_text()[-6000:])


if __name__ == "__main__":
    main(*sys.argv[1:])
