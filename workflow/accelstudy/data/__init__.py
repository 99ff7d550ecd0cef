"""Task data: WikiText-2, HellaSwag and BoolQ from the Hub, local files, or offline stand-ins;
instruction data for fine-tuning; dust images for SR3."""
