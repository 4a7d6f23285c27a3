# A gpushare_service is imported by its name.
terraform import gpushare_service.NAME NAME
