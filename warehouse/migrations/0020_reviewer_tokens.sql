-- API tokens of review-app accounts (issue 23): `refusal-audit review token create` makes one
-- for an account, and `calibrate run` authenticates with it as that account (a verified
-- starter). Only an argon2id hash of the token's secret is stored; token_id is the public
-- part of the token, used to find its row. Versions like reviewers: a revocation is a new
-- row with a later updated_at, and reads use FINAL.
CREATE TABLE IF NOT EXISTS {db}.reviewer_tokens
(
    token_id      String,
    reviewer      String,
    token_hash    String,
    created_by    String,
    created_at    DateTime64(3, 'UTC'),
    revoked       Bool,
    updated_at    DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(updated_at)
ORDER BY token_id;
