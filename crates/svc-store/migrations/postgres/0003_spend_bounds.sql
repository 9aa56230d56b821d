-- Spend records hold only sane numbers: tokens from 0 to 1,000,000,000 of each kind, a cost from 0 to
-- 1,000,000 units (10^15 nano-units), a latency of at least 0. Rows written before these bounds existed (an
-- upstream once reported 2^64-1 tokens) are clamped into them, so sums over a team's records cannot overflow.
UPDATE spend_log
SET prompt_tokens     = LEAST(GREATEST(prompt_tokens, 0), 1000000000),
    completion_tokens = LEAST(GREATEST(completion_tokens, 0), 1000000000),
    cost              = LEAST(GREATEST(cost, 0), 1000000000000000),
    latency_ms        = GREATEST(latency_ms, 0)
WHERE prompt_tokens NOT BETWEEN 0 AND 1000000000
   OR completion_tokens NOT BETWEEN 0 AND 1000000000
   OR cost NOT BETWEEN 0 AND 1000000000000000
   OR latency_ms < 0;
ALTER TABLE spend_log ADD CONSTRAINT spend_log_bounded CHECK (
    prompt_tokens BETWEEN 0 AND 1000000000
    AND completion_tokens BETWEEN 0 AND 1000000000
    AND cost BETWEEN 0 AND 1000000000000000
    AND latency_ms >= 0
);
