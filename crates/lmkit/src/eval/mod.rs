//! Evaluation: SQuAD EM/F1, ROUGE, LAMBADA, classification accuracy/F1,
//! and the readers of their data files.

pub mod classify;
pub mod lambada;
pub mod rouge;
pub mod run;
pub mod seqeval;
pub mod squad;
pub mod summarize;

pub use classify::{accuracy, classify_scores, macro_f1, ClassifyScores};
pub use lambada::{
    lambada_scores, read_lambada, split_last_word, LambadaItem, LambadaOutcome, LambadaScores,
};
pub use rouge::{rouge, rouge_means, Rouge, RougeMeans, RougeScore};
pub use seqeval::{get_entities, seqeval_scores, SeqevalScores, TypeScores};
pub use squad::{exact_match, f1_score, normalize_answer, squad_scores, SquadScores};
pub use summarize::{first_sentences, read_summarize, tldr_prompt, SummarizeItem};
