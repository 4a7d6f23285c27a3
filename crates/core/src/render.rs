//! Rendering of plans and fleets: Terraform-style text, the fleet picture, JSON.
