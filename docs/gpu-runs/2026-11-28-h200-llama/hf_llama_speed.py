"""transformers' LlamaForCausalLM, the shape of the big dl-train run: bf16 autocast over f32 master
weights, fused AdamW, 40 steps, median tokens/s of steps 10-40 (as dl-train's run is read)."""
import json, time, torch, transformers
from transformers import LlamaConfig, LlamaForCausalLM
cfg = LlamaConfig(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                  num_attention_heads=12, num_key_value_heads=4, max_position_embeddings=1024,
                  tie_word_embeddings=False, attn_implementation="sdpa")
m = LlamaForCausalLM(cfg).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
B, T = 8, 1024
x = torch.randint(0, 256, (B, T), device="cuda")
times = []
for i in range(40):
    torch.cuda.synchronize(); t = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(x, labels=x).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(); times.append(time.perf_counter() - t)
med = sorted(times[10:])[len(times[10:]) // 2]
print(json.dumps({"version": transformers.__version__, "torch": torch.__version__, "tokens_per_sec": B * T / med}))
