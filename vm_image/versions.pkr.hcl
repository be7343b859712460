# Pinned for `packer init` with Packer >= 1.7, where builders are plugins.
# Kept apart from spotline.pkr.hcl so the template itself also validates with
# Packer 1.6 (Debian's package, googlecompute built in), as the tests do.
packer {
  required_version = ">= 1.7.0"
  required_plugins {
    googlecompute = {
      version = "= 1.1.6"
      source  = "github.com/hashicorp/googlecompute"
    }
  }
}
