# A gpushare_gpu_instance is imported by its name.
terraform import gpushare_gpu_instance.NAME NAME
