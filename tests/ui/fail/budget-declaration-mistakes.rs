use ratelimit_runtime::budget;

budget!(NO_WINDOW = limit = 5);
budget!(WITH_BLOCK = limit = 5, window = "1m", block = "5m");
budget!(MISSPELLED = limit = 5, windw = "1m");
budget!(TOO_MANY_FOR_A_LOG = limit = 5000, window = "1m", algorithm = "sliding_log");
budget!(A_SHARED_BUDGET_NAME_LONGER_THAN_SIXTY_FOUR_CHARACTERS_CANNOT_BE_OVERRIDDEN = limit = 5, window = "1m");

fn main() {}
