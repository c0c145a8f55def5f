//! candle, the engine text-embeddings-inference runs on CPU, as a peer of bench/embed_speed:
//!
//!     candle_peer SNAPSHOT ITEMS.jsonl BATCH ROUNDS
//!
//! SNAPSHOT is a Hugging Face BERT checkpoint (config.json, model.safetensors, tokenizer.json).
//! A BertForSequenceClassification scores [query, document] pairs: the pooler (dense, tanh on
//! [CLS]) and the classifier, as transformers computes them; any other BERT embeds texts: mean
//! pooling over the mask, then L2 normalization. Tokenization is timed with the model, batches
//! are padded to their longest item, and RAYON_NUM_THREADS sets the threads. Prints
//! {"seconds": best of ROUNDS, "embeddings": the answers (vectors, or the logits)}.
use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{linear, Linear, VarBuilder};
use candle_transformers::models::bert::{BertModel, Config};
use std::time::Instant;
use tokenizers::{EncodeInput, PaddingParams, Tokenizer};

type Error = Box<dyn std::error::Error + Send + Sync>;

struct Classifier {
    pooler: Linear,
    out: Linear,
}

struct Peer {
    model: BertModel,
    classifier: Option<Classifier>,
    tokenizer: Tokenizer,
}

impl Peer {
    fn load(snapshot: &str) -> Result<Self, Error> {
        let config_text = std::fs::read_to_string(format!("{snapshot}/config.json"))?;
        let config: Config = serde_json::from_str(&config_text)?;
        let raw: serde_json::Value = serde_json::from_str(&config_text)?;
        let is_classifier = raw["architectures"]
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n == "BertForSequenceClassification"));
        let weights = format!("{snapshot}/model.safetensors");
        let vb =
            unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &Device::Cpu)? };
        let model = BertModel::load(vb.clone(), &config)?;
        let classifier = if is_classifier {
            let labels = raw["id2label"].as_object().map_or(2, |m| m.len());
            let hidden = config.hidden_size;
            Some(Classifier {
                pooler: linear(hidden, hidden, vb.pp("bert.pooler.dense"))?,
                out: linear(hidden, labels, vb.pp("classifier"))?,
            })
        } else {
            None
        };
        let mut tokenizer = Tokenizer::from_file(format!("{snapshot}/tokenizer.json"))?;
        tokenizer.with_truncation(None)?;
        tokenizer.with_padding(Some(PaddingParams::default()));
        Ok(Self {
            model,
            classifier,
            tokenizer,
        })
    }

    /// The answers for one batch: [batch, hidden] embeddings or [batch, labels] logits.
    fn run(&self, batch: &[serde_json::Value]) -> Result<Tensor, Error> {
        let inputs: Vec<EncodeInput> = batch
            .iter()
            .map(|item| match item {
                serde_json::Value::Array(pair) => EncodeInput::Dual(
                    pair[0].as_str().unwrap_or_default().to_owned().into(),
                    pair[1].as_str().unwrap_or_default().to_owned().into(),
                ),
                text => EncodeInput::Single(text.as_str().unwrap_or_default().to_owned().into()),
            })
            .collect();
        let encodings = self.tokenizer.encode_batch(inputs, true)?;
        let rows = encodings.len();
        let length = encodings[0].len();
        let flat = |f: &dyn Fn(&tokenizers::Encoding) -> &[u32]| -> Vec<u32> {
            encodings
                .iter()
                .flat_map(|e| f(e).iter().copied())
                .collect()
        };
        let device = &Device::Cpu;
        let ids = Tensor::from_vec(flat(&|e| e.get_ids()), (rows, length), device)?;
        let types = Tensor::from_vec(flat(&|e| e.get_type_ids()), (rows, length), device)?;
        let mask = Tensor::from_vec(flat(&|e| e.get_attention_mask()), (rows, length), device)?;
        let states = self.model.forward(&ids, &types, Some(&mask))?;
        if let Some(classifier) = &self.classifier {
            let first = states.narrow(1, 0, 1)?.squeeze(1)?;
            let pooled = classifier.pooler.forward(&first)?.tanh()?;
            return Ok(classifier.out.forward(&pooled)?);
        }
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = states.broadcast_mul(&mask)?.sum(1)?;
        let pooled = summed.broadcast_div(&mask.sum(1)?)?;
        let norm = pooled.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?;
        Ok(pooled.broadcast_div(&norm)?)
    }
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        return Err("usage: candle_peer SNAPSHOT ITEMS.jsonl BATCH ROUNDS".into());
    }
    let peer = Peer::load(&args[1])?;
    let items: Vec<serde_json::Value> = std::fs::read_to_string(&args[2])?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let batch: usize = args[3].parse()?;
    let rounds: usize = args[4].parse()?;
    let mut best = f64::INFINITY;
    let mut answers = Vec::new();
    for _ in 0..rounds.max(1) {
        let start = Instant::now();
        answers.clear();
        for chunk in items.chunks(batch) {
            answers.push(peer.run(chunk)?);
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    let rows: Vec<Vec<f32>> = Tensor::cat(&answers, 0)?.to_vec2()?;
    println!(
        "{}",
        serde_json::json!({ "seconds": best, "embeddings": rows })
    );
    Ok(())
}
