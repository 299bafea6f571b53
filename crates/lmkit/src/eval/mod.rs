//! Evaluation: SQuAD EM/F1, ROUGE, BLEU, LAMBADA, CBT, zero-shot
//! translation and QA, classification accuracy/F1, regression correlations
//! (Pearson, Spearman), and the readers of their data files.

pub mod benchmark;
pub mod bleu;
pub mod cbt;
pub mod classify;
pub mod lambada;
pub mod qa;
pub mod regression;
pub mod rouge;
pub mod run;
pub mod seqeval;
pub mod squad;
pub mod summarize;
pub mod translate;

pub use bleu::{corpus_bleu, tokenize_13a, Bleu, BleuStats};
pub use cbt::{cbt_scores, read_cbt, CbtItem, CbtOutcome, CbtScores};
pub use classify::{accuracy, classify_scores, macro_f1, ClassifyScores};
pub use lambada::{
    lambada_scores, read_lambada, split_last_word, LambadaItem, LambadaOutcome, LambadaScores,
};
pub use qa::{qa_items, read_qa, QaItem, QaRow};
pub use regression::{average_ranks, pearson, regression_scores, spearman, RegressionScores};
pub use rouge::{rouge, rouge_means, Rouge, RougeMeans, RougeScore};
pub use seqeval::{get_entities, seqeval_scores, SeqevalScores, TypeScores};
pub use squad::{exact_match, f1_score, normalize_answer, squad_scores, SquadScores};
pub use summarize::{first_sentences, read_summarize, tldr_prompt, SummarizeItem};
pub use translate::{
    read_translation_jsonl, read_translation_texts, reverse, translate_prompt, TranslationPair,
};
