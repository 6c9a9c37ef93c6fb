# ruff: noqa: E501
"""Every Xid meaning and action of the catalog, marked for translation (generated: do not edit).

Written by ``python manage.py rule_catalog`` from diagnosis/core/data/xid_catalog.json
(diagnosis/rule_text.py): ``makemessages`` reads these literals; the incident pages translate
the catalog's English with the ``core_text`` filter.
"""

from django.utils.translation import gettext_noop

XID_TEXT: tuple[str, ...] = (
    # xgettext:no-python-format
    gettext_noop("Not used by current drivers on Ampere and newer GPUs (NVIDIA: unused)."),
    # xgettext:no-python-format
    gettext_noop("GPU stopped processing."),
    # xgettext:no-python-format
    gettext_noop("Invalid or corrupted push buffer stream."),
    # xgettext:no-python-format
    gettext_noop("Graphics Engine Exception."),
    # xgettext:no-python-format
    gettext_noop("Invalid or illegal push buffer stream."),
    # xgettext:no-python-format
    gettext_noop("GPU memory page fault."),
    # xgettext:no-python-format
    gettext_noop("Driver firmware error."),
    # xgettext:no-python-format
    gettext_noop("Copy Engine Exception."),
    # xgettext:no-python-format
    gettext_noop("Graphics Engine fault during context switch."),
    gettext_noop(
        # xgettext:no-python-format
        "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda applications and hitting a DBE."
    ),
    # xgettext:no-python-format
    gettext_noop("Double Bit ECC Error."),
    # xgettext:no-python-format
    gettext_noop("Auxiliary power is not connected to the GPU board."),
    # xgettext:no-python-format
    gettext_noop("Video processor exception."),
    # xgettext:no-python-format
    gettext_noop("Internal micro-controller halt (newer drivers)."),
    # xgettext:no-python-format
    gettext_noop("GPU memory remapping event."),
    # xgettext:no-python-format
    gettext_noop("GPU memory remapping failure."),
    # xgettext:no-python-format
    gettext_noop("Illegal access by driver."),
    # xgettext:no-python-format
    gettext_noop("NVDEC0 Exception."),
    # xgettext:no-python-format
    gettext_noop("Graphics Engine class error."),
    # xgettext:no-python-format
    gettext_noop("CE3: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE4: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE5: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("NVLINK Error."),
    # xgettext:no-python-format
    gettext_noop("CE6: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE7: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE8: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("vGPU Start Error."),
    # xgettext:no-python-format
    gettext_noop("GPU has fallen off the bus."),
    # xgettext:no-python-format
    gettext_noop("Corrupted data sent to GPU."),
    # xgettext:no-python-format
    gettext_noop("NVJPG0 Error."),
    # xgettext:no-python-format
    gettext_noop("NVDEC1 Error."),
    # xgettext:no-python-format
    gettext_noop("NVDEC2 Error."),
    # xgettext:no-python-format
    gettext_noop("CE9: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("OFA Exception."),
    # xgettext:no-python-format
    gettext_noop("NVDEC3 Error."),
    # xgettext:no-python-format
    gettext_noop("NVDEC4 Error."),
    # xgettext:no-python-format
    gettext_noop("High single-bit ECC error rate."),
    # xgettext:no-python-format
    gettext_noop("Non-fatal violation of provisioned InfoROM wear limit."),
    # xgettext:no-python-format
    gettext_noop("Contained memory error."),
    # xgettext:no-python-format
    gettext_noop("Uncontained memory error."),
    # xgettext:no-python-format
    gettext_noop("NVDEC5 Error."),
    # xgettext:no-python-format
    gettext_noop("NVDEC6 Error."),
    # xgettext:no-python-format
    gettext_noop("NVDEC7 Error."),
    # xgettext:no-python-format
    gettext_noop("NVJPG1 Error."),
    # xgettext:no-python-format
    gettext_noop("NVJPG2 Error."),
    # xgettext:no-python-format
    gettext_noop("NVJPG3 Error."),
    # xgettext:no-python-format
    gettext_noop("NVJPG4 Error."),
    # xgettext:no-python-format
    gettext_noop("NVJPG5 Error."),
    # xgettext:no-python-format
    gettext_noop("NVJPG6 Error."),
    # xgettext:no-python-format
    gettext_noop("NVJPG7 Error."),
    # xgettext:no-python-format
    gettext_noop("SMBPBI Test Message."),
    # xgettext:no-python-format
    gettext_noop("SMBPBI Test Message Silent."),
    # xgettext:no-python-format
    gettext_noop("Context Switch Timeout Error."),
    # xgettext:no-python-format
    gettext_noop("Security Fault Error."),
    # xgettext:no-python-format
    gettext_noop("GSP RPC Timeout."),
    # xgettext:no-python-format
    gettext_noop("GSP Error."),
    # xgettext:no-python-format
    gettext_noop("C2C Error."),
    # xgettext:no-python-format
    gettext_noop("CE10: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE11: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE12: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE13: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE14: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE15: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE16: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE17: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE18: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("CE19: Unknown Error."),
    # xgettext:no-python-format
    gettext_noop("Link Training Failed."),
    # xgettext:no-python-format
    gettext_noop("NVLink Privilege Error."),
    # xgettext:no-python-format
    gettext_noop("OFA1 Error."),
    # xgettext:no-python-format
    gettext_noop("ECC Unrecovered Error."),
    # xgettext:no-python-format
    gettext_noop("CUDA Fast Path Error."),
    # xgettext:no-python-format
    gettext_noop("NVENC3 Error."),
    # xgettext:no-python-format
    gettext_noop("GPU Initialization Error."),
    # xgettext:no-python-format
    gettext_noop("NVLINK: SAW Error."),
    # xgettext:no-python-format
    gettext_noop("NVLINK: RLW Error."),
    # xgettext:no-python-format
    gettext_noop("NVLINK: TLW Error."),
    # xgettext:no-python-format
    gettext_noop("NVLINK: TREX Error."),
    # xgettext:no-python-format
    gettext_noop("NVLINK: NVLPW_CTRL Error."),
    # xgettext:no-python-format
    gettext_noop("NVLINK: NETIR Error."),
    # xgettext:no-python-format
    gettext_noop("NVLINK: MSE Error."),
    # xgettext:no-python-format
    gettext_noop("Key rotation Error."),
    # xgettext:no-python-format
    gettext_noop("DLA SMMU Error."),
    # xgettext:no-python-format
    gettext_noop("DLA timeout Error."),
    # xgettext:no-python-format
    gettext_noop("GPU Recovery Action Changed."),
    # xgettext:no-python-format
    gettext_noop("NVLINK: SW Defined Error."),
    # xgettext:no-python-format
    gettext_noop("Resource Retirement Event."),
    # xgettext:no-python-format
    gettext_noop("Resource Retirement Failure."),
    # xgettext:no-python-format
    gettext_noop("GPU Fatal Timeout."),
    # xgettext:no-python-format
    gettext_noop("CHI Non-Data Error."),
    # xgettext:no-python-format
    gettext_noop("Channel Retirement Event."),
    # xgettext:no-python-format
    gettext_noop("Channel Retirement Failure."),
    # xgettext:no-python-format
    gettext_noop("Power Smoothing HW Circuitry capability reengaged."),
    # xgettext:no-python-format
    gettext_noop("Power Smoothing HW Circuitry capability disengaged."),
    # xgettext:no-python-format
    gettext_noop("Power Smoothing HW Circuitry low lifetime reached."),
    # xgettext:no-python-format
    gettext_noop("Power Smoothing HW Circuitry lifetime exhausted."),
    gettext_noop(
        # xgettext:no-python-format
        "CC traffic seen prior to link properly being configured for encrypted traffic."
    ),
    # xgettext:no-python-format
    gettext_noop("PCIE_FATAL_TIMEOUT."),
    # xgettext:no-python-format
    gettext_noop("Errors found in WPR (write protected region)."),
    # xgettext:no-python-format
    gettext_noop("Internal micro-controller halt."),
    # xgettext:no-python-format
    gettext_noop("Interrupt seen in CC mode."),
    gettext_noop(
        # xgettext:no-python-format
        "Additional to Xid 48 providing more details on particulars of fault to differentiate DRAM/SRAM."
    ),
    # xgettext:no-python-format
    gettext_noop("C2C Fatal Link Failure."),
    # xgettext:no-python-format
    gettext_noop("Drain the node and contact NVIDIA support / open a service case."),
    gettext_noop(
        # xgettext:no-python-format
        "Restart the application (its GPU context is lost). Next: contact NVIDIA support if it repeats."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Restart the application (its GPU context is lost). Next: check the application and its CUDA version."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Restart the application (its GPU context is lost). Next: if it repeats on the same GPC/TPC, run DCGM diagnostics (hardware)."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "No action needed for this Xid alone; watch for repeats. Next: contact NVIDIA support if it repeats."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Restart the application (its GPU context is lost). Next: if it repeats with a known-good application, run DCGM diagnostics."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "No action needed for this Xid alone; watch for repeats. Next: check the application and its CUDA version."
    ),
    # xgettext:no-python-format
    gettext_noop("Follow the Xid reported with it; alone, restart Fabric Manager."),
    gettext_noop(
        # xgettext:no-python-format
        "Drain the GPU's jobs and reset the GPU (nvidia-smi -r) or reboot. Next: contact NVIDIA support if it repeats."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Drain the GPU's jobs and reset the GPU (nvidia-smi -r) or reboot. Next: check the retired pages / remapped rows; replace the GPU if they grow."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Drain the node and have the hardware inspected (power, seating). Next: contact NVIDIA support if it repeats."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Restart the application (its GPU context is lost). Next: investigate the driver and firmware versions."
    ),
    # xgettext:no-python-format
    gettext_noop("No action needed for this Xid alone; watch for repeats."),
    gettext_noop(
        # xgettext:no-python-format
        "No action needed for this Xid alone; watch for repeats. Next: investigate the driver and firmware versions."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Update the GPU driver / firmware (vGPU). Next: update the driver / firmware."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Drain the node and reboot it (a cold restart of the machine). Next: contact NVIDIA support if it repeats."
    ),
    # xgettext:no-python-format
    gettext_noop("Restart the application (its GPU context is lost)."),
    # xgettext:no-python-format
    gettext_noop("Drain the GPU's jobs and reset the GPU (nvidia-smi -r) or reboot."),
    gettext_noop(
        # xgettext:no-python-format
        "No action needed for this Xid alone; watch for repeats. Next: follow NVIDIA's Xid 137 workflow."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Drain the GPU's jobs and reset the GPU (nvidia-smi -r) or reboot. Next: investigate the driver and firmware versions."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Drain the GPU's jobs and reset the GPU (nvidia-smi -r) or reboot. Next: investigate the link's signal integrity."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Drain the GPU's jobs and reset the GPU (nvidia-smi -r) or reboot. Next: follow NVIDIA's NVLink5 error workflow."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Read the Xid 154 message: it names the recovery the GPU now needs (e.g. reset, reboot)."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Drain the GPU's jobs and reset the GPU (nvidia-smi -r) or reboot. Next: investigate the driver and the application."
    ),
    gettext_noop(
        # xgettext:no-python-format
        "Check the application, CUDA and driver versions on this GPU. Next: report it if it occurs alone."
    ),
    # xgettext:no-python-format
    gettext_noop("Drain the node and reboot it (a cold restart of the machine)."),
    # xgettext:no-python-format
    gettext_noop("Check the application, CUDA and driver versions on this GPU."),
    # xgettext:no-python-format
    gettext_noop("unknown Xid, see NVIDIA docs (https://docs.nvidia.com/deploy/xid-errors/)"),
    gettext_noop(
        # xgettext:no-python-format
        "Look the code up in NVIDIA's Xid documentation and the driver release notes."
    ),
)
