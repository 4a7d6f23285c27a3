# A gpushare_capacity_provider is imported by its name.
terraform import gpushare_capacity_provider.NAME NAME
