"""Quantized linear look-alike: a kernel built with keyword arguments, one of which the release dropped."""


class W4A8Scheme:
    def __init__(self, group_size):
        self.group_size = group_size

    def create_weights(self, layer, kernel_type, config):
        layer.register("weight_packed")
        layer.register("weight_scale")
        layer.register("weight_zero_point")
        self.kernel = kernel_type(
            config,
            w_q_param_name="weight_packed",
            w_s_param_name="weight_scale",
            w_zp_param_name="weight_zero_point",
        )

    def process_weights_after_loading(self, layer):
        self.kernel.process_weights_after_loading(layer)
