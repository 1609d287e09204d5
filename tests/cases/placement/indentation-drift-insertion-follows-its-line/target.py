class Attention:
    def forward(self, hidden, lengths=None):
        qkv = self.proj(hidden)
        q, k, v = qkv.split(3, dim=-1)

        if lengths is None:
            out = self.attn(q, k, v)
        else:
            out = self.attn(q, k, v, lengths)
        return out
