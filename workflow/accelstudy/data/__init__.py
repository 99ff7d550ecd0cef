"""Task data (Hub, local files or offline stand-ins), instructions to fine-tune on, SR3's dust."""
