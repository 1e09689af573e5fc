"""Busy signals, best first. A GPU-minute takes its busy fraction from the best signal it has,
and signals of different kinds are never averaged together."""

UTIL_KINDS = (
    "dcgm_gr_engine_active",  # DCGM_FI_PROF_GR_ENGINE_ACTIVE: graphics/compute engine busy, ratio
    "dcgm_sm_active",  # DCGM_FI_PROF_SM_ACTIVE: SMs busy, ratio
    "dcgm_gpu_util",  # DCGM_FI_DEV_GPU_UTIL: NVML "a kernel was running", %
    "nvidia_smi_utilization_gpu",  # nvidia-smi utilization.gpu, the same NVML counter
    "nvidia_smi_dmon_sm",  # nvidia-smi dmon "sm" column
    "trace_duty_cycle",  # public cluster traces' GPU duty cycle
)
